/*
 * rwrouter.wire._scan: the compiled per-series loop of the receive path (optional).
 *
 * Same contract and same output as the pure-Python rwrouter.routing.scan.scan_request_py, which
 * is the reference: see its docstring for the arguments and the result. This file only makes
 * the common shape fast: series whose labels come first and whose other fields are plain
 * samples (what every Prometheus sender writes). Everything else is handed to Python:
 *
 *   - a series of another shape: rwrouter.wire.codec.split_series (exemplars, histograms,
 *     interleaved labels, unusual sample encodings);
 *   - a metadata entry: rwrouter.wire.validate.check_metadata;
 *   - a label set not in the cache: the caller's ``miss`` callable;
 *   - a destination that filters exemplars or histograms: the caller's ``filt`` callable;
 *   - malformed framing anywhere: the whole request is scanned again by the pure-Python
 *     function, which raises the reference DecodeError (so both paths give the same errors).
 *
 * Wire format: protobuf encoding spec; message schema: remote write 1.0 (prompb).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_labelcache.h"

#define MAX_FIELD_NUMBER ((1u << 29) - 1)
#define MAX_DESTINATIONS 64

static PyObject *split_series_fn;   /* rwrouter.wire.codec.split_series */
static PyObject *check_metadata_fn; /* rwrouter.wire.validate.check_metadata */
static PyObject *str_filtered;      /* "filtered" */
static PyObject *str_labels, *str_rest, *str_samples, *str_exemplars, *str_histograms;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

/* Room for `extra` more bytes: 0 ok, -1 MemoryError. The buffer is allocated by the first call
 * even for 0 bytes, so its data is never NULL once grown (memcpy from or to a NULL pointer is
 * undefined behaviour even for 0 bytes, e.g. an empty series' labels). */
static int buf_grow(Buf *b, Py_ssize_t extra) {
    if (b->data && b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->data, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *put_varint(char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static inline char *put_u32(char *p, uint32_t v) {
    p[0] = (char)(v & 0xFF);
    p[1] = (char)((v >> 8) & 0xFF);
    p[2] = (char)((v >> 16) & 0xFF);
    p[3] = (char)((v >> 24) & 0xFF);
    return p + 4;
}

static inline uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* A varint at *pos (before end): 1 and the value, or 0 when truncated, longer than 10 bytes
 * or over 64 bits (the caller then lets the pure path raise the reference error). */
static inline int read_varint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    while (p < end && shift < 70) {
        uint8_t byte = d[p++];
        if (shift == 63 && (byte & 0x7E)) return 0;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = p;
            *out = result;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* Skip a varint at *pos (before end) as walk.read_varint accepts it: up to 10 bytes, any value
 * (a skipped field's value may exceed 64 bits); 0 when truncated or longer. */
static inline int skip_varint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end) {
    Py_ssize_t p = *pos;
    for (int i = 0; i < 10 && p < end; i++) {
        if (d[p++] < 0x80) {
            *pos = p;
            return 1;
        }
    }
    return 0;
}

/* Mirror of codec._plain_samples: how many samples make up all of d[pos:end] when it is only
 * Sample fields of the usual shapes; 0 otherwise. */
static Py_ssize_t plain_samples(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end) {
    Py_ssize_t count = 0;
    while (pos < end) {
        if (d[pos] != 0x12 || pos + 1 >= end || d[pos + 1] >= 0x80) return 0;
        Py_ssize_t body = pos + 2, stop = pos + 2 + d[pos + 1];
        if (stop > end) return 0;
        if (body < stop && d[body] == 0x09) body += 9;
        if (body < stop) {
            Py_ssize_t n = stop - body;
            if (d[body] != 0x10 || n < 2 || n > 11 || d[stop - 1] >= 0x80) return 0;
            for (Py_ssize_t i = body + 1; i < stop - 1; i++)
                if (d[i] < 0x80) return 0;
        } else if (body > stop) {
            return 0;
        }
        count++;
        pos = stop;
    }
    return count;
}

typedef struct {
    Py_ssize_t dest;
    PyObject *reason; /* borrowed from a cache entry that the caller's dicts keep alive */
    long long samples;
} Drop;

typedef struct {
    Py_ssize_t ndest;
    Buf bodies[MAX_DESTINATIONS];
    Buf indexes[MAX_DESTINATIONS];
    long long samples[MAX_DESTINATIONS];
    long long series[MAX_DESTINATIONS];
    int filters[MAX_DESTINATIONS];
    Drop *drops; /* by first occurrence; grown as needed (destinations x reasons) */
    Py_ssize_t ndrops, capdrops;
    PyObject *drop_refs; /* list keeping the reasons alive */
} State;

static void state_free(State *s) {
    for (Py_ssize_t i = 0; i < s->ndest; i++) {
        PyMem_Free(s->bodies[i].data);
        PyMem_Free(s->indexes[i].data);
    }
    PyMem_Free(s->drops);
    Py_CLEAR(s->drop_refs);
}

/* 0 ok, -1 error set. */
static int add_drop(State *s, Py_ssize_t dest, PyObject *reason, long long n) {
    for (Py_ssize_t k = 0; k < s->ndrops; k++) {
        if (s->drops[k].dest == dest && s->drops[k].reason == reason) {
            s->drops[k].samples += n;
            return 0;
        }
    }
    if (s->ndrops >= s->capdrops) {
        Py_ssize_t cap = s->capdrops ? 2 * s->capdrops : 16;
        Drop *p = PyMem_Realloc(s->drops, (size_t)cap * sizeof(Drop));
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        s->drops = p;
        s->capdrops = cap;
    }
    if (PyList_Append(s->drop_refs, reason) < 0) return -1;
    s->drops[s->ndrops].dest = dest;
    s->drops[s->ndrops].reason = reason;
    s->drops[s->ndrops].samples = n;
    s->ndrops++;
    return 0;
}

static int write_frame(State *s, Py_ssize_t i, const char *labels, Py_ssize_t nlabels,
                       const char *rest, Py_ssize_t nrest, long long kept, uint32_t hash) {
    uint64_t inner = (uint64_t)nlabels + (uint64_t)nrest;
    Py_ssize_t frame = 1 + varint_size(inner) + (Py_ssize_t)inner;
    Buf *b = &s->bodies[i];
    if (buf_grow(b, frame) < 0 || buf_grow(&s->indexes[i], 12) < 0) return -1;
    char *p = b->data + b->len;
    *p++ = 0x0A;
    p = put_varint(p, inner);
    memcpy(p, labels, (size_t)nlabels);
    p += nlabels;
    memcpy(p, rest, (size_t)nrest);
    b->len += frame;
    char *q = s->indexes[i].data + s->indexes[i].len;
    q = put_u32(q, (uint32_t)frame);
    q = put_u32(q, (uint32_t)kept);
    put_u32(q, hash);
    s->indexes[i].len += 12;
    s->samples[i] += kept;
    s->series[i] += 1;
    return 0;
}

static long long attr_int(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    long long n = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return n;
}

/* Entry bytes as routing counts them: key + the compact entry. */
static Py_ssize_t entry_bytes(PyObject *key, PyObject *entry) {
    return PyBytes_GET_SIZE(key) + PyBytes_GET_SIZE(entry);
}

/* A reference function (module.name) on these arguments: the compiled functions hand it what
 * they do not take themselves, so it gives the result or raises the reference error. */
static PyObject *call_reference(const char *modname, const char *name, PyObject *const *args,
                                Py_ssize_t nargs) {
    PyObject *mod = PyImport_ImportModule(modname);
    if (!mod) return NULL;
    PyObject *fn = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    if (!fn) return NULL;
    PyObject *res = PyObject_Vectorcall(fn, args, (size_t)nargs, NULL);
    Py_DECREF(fn);
    return res;
}

static PyObject *pure_scan(PyObject *const *args, Py_ssize_t nargs) {
    return call_reference("rwrouter.routing.scan", "scan_request_py", args, nargs);
}

static PyObject *signature_values(const uint8_t *d, Py_ssize_t end, PyObject *names,
                                  int legacy);
static PyObject *crc32_fn; /* zlib.crc32: the shard hash of routing.shard_hash */

/* The miss path's template shortcut of routing.Router._from_template, for a label set the
 * Python side has a template for: 1 and *out a new entry, 0 when it does not apply (the caller
 * calls miss()), -1 on error. templates: {signature values: tuple of bytes pieces}. */
static int template_entry(const char *kp, Py_ssize_t kn, PyObject *names, PyObject *templates,
                          int legacy, PyObject **out) {
    PyObject *values = signature_values((const uint8_t *)kp, kn, names, legacy);
    if (!values) return -1;
    if (values == Py_None) {
        Py_DECREF(values);
        return 0;
    }
    PyObject *parts = PyDict_GetItemWithError(templates, values);
    Py_DECREF(values);
    if (!parts) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) < 1) return 0;
    Py_ssize_t nparts = PyTuple_GET_SIZE(parts), total = 4 * (nparts - 1);
    for (Py_ssize_t i = 0; i < nparts; i++) {
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(parts, i))) return 0;
        total += PyBytes_GET_SIZE(PyTuple_GET_ITEM(parts, i));
    }
    /* zlib.crc32 may release the GIL (large inputs) and another thread clear the templates:
     * hold the pieces. */
    Py_INCREF(parts);
    PyObject *view = PyMemoryView_FromMemory((char *)kp, kn, PyBUF_READ);
    PyObject *crc = view ? PyObject_CallOneArg(crc32_fn, view) : NULL;
    Py_XDECREF(view);
    unsigned long h = crc ? PyLong_AsUnsignedLong(crc) : 0;
    Py_XDECREF(crc);
    PyObject *entry = NULL;
    if (crc && !(h == (unsigned long)-1 && PyErr_Occurred()))
        entry = PyBytes_FromStringAndSize(NULL, total);
    if (!entry) {
        Py_DECREF(parts);
        return -1;
    }
    char *p = PyBytes_AS_STRING(entry);
    for (Py_ssize_t i = 0; i < nparts; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        if (i) p = put_u32(p, (uint32_t)h);
        memcpy(p, PyBytes_AS_STRING(part), (size_t)PyBytes_GET_SIZE(part));
        p += PyBytes_GET_SIZE(part);
    }
    Py_DECREF(parts);
    *out = entry;
    return 1;
}

#define BAIL goto bail
#define FAIL goto fail

/* Where the leading Label fields (tag 0x0a) of a series d[p:vend] end, as codec.split_series
 * scans them; -1 when one is malformed or runs past the series. */
static inline Py_ssize_t leading_labels_end(const uint8_t *d, Py_ssize_t p, Py_ssize_t vend) {
    while (p < vend && d[p] == 0x0A) {
        if (p + 1 < vend && d[p + 1] < 0x80) {
            p += 2 + d[p + 1];
        } else {
            Py_ssize_t q = p + 1;
            uint64_t n;
            if (!read_varint(d, &q, vend, &n) || n > (uint64_t)(vend - q)) return -1;
            p = q + (Py_ssize_t)n;
        }
    }
    return p > vend ? -1 : p;
}

typedef struct {
    Py_ssize_t start, len; /* the raw labels of a plain series: d[start:start+len] */
    Digest digest;
} PreHash;

#define PREFETCH_SLOTS 8   /* series ahead whose slot is prefetched */
#define PREFETCH_OBJECTS 4 /* series ahead whose outcome is prefetched */

static inline void lc_prefetch_slot(LabelCache *c, Digest g) {
    __builtin_prefetch(&c->slots[g.h1 & (uint64_t)c->mask]);
}

static inline void lc_prefetch_objects(LabelCache *c, Digest g) {
    LCSlot *slot = &c->slots[g.h1 & (uint64_t)c->mask];
    if (slot->value) __builtin_prefetch(PyBytes_AS_STRING(slot->value));
}

/* Hash the labels of the leading series of a request whose framing is the usual one (stops at
 * the first anything else: the main loop then hashes as it goes). Returns how many, or -1 on
 * MemoryError; *out gets a PyMem array the caller frees. */
static Py_ssize_t prehash(const uint8_t *d, Py_ssize_t end, PreHash **out) {
    Py_ssize_t cap = 256, n = 0, pos = 0;
    PreHash *pre = PyMem_Malloc(sizeof(PreHash) * (size_t)cap);
    if (!pre) {
        PyErr_NoMemory();
        return -1;
    }
    while (pos < end && d[pos] == 0x0A) {
        uint64_t len;
        Py_ssize_t at = pos + 1;
        if (!read_varint(d, &at, end, &len) || len > (uint64_t)(end - at)) break;
        Py_ssize_t vend = at + (Py_ssize_t)len, p = leading_labels_end(d, at, vend);
        if (p < 0) break;
        if (n == cap) {
            PreHash *grown = PyMem_Realloc(pre, sizeof(PreHash) * (size_t)(cap * 2));
            if (!grown) {
                PyMem_Free(pre);
                PyErr_NoMemory();
                return -1;
            }
            pre = grown;
            cap *= 2;
        }
        pre[n].start = at;
        pre[n].len = p - at;
        pre[n].digest = lc_digest(d + at, p - at);
        n++;
        pos = vend;
    }
    *out = pre;
    return n;
}

static PyObject *scan_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7 && nargs != 9 && nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "scan_request takes 7, 9 or 10 arguments");
        return NULL;
    }
    PyObject *data = args[0], *young = args[1], *old = args[2], *miss = args[3];
    PyObject *filters = args[4], *filt = args[5], *reasons = args[6];
    /* The template shortcut (templates dict, names tuple), or None */
    PyObject *templates = nargs >= 9 ? args[7] : Py_None, *names = nargs >= 9 ? args[8] : Py_None;
    int legacy = nargs == 10 ? PyObject_IsTrue(args[9]) : 0; /* legacy names only */
    if (legacy < 0) return NULL;
    int use_templates = PyDict_CheckExact(templates) && PyTuple_CheckExact(names);
    for (Py_ssize_t i = 0; use_templates && i < PyTuple_GET_SIZE(names); i++)
        use_templates = PyBytes_CheckExact(PyTuple_GET_ITEM(names, i));
    /* The cache generations: both LabelCache (looked up in place), or both dicts. */
    int label_caches = Py_IS_TYPE(young, &LabelCacheType) && Py_IS_TYPE(old, &LabelCacheType);
    int dicts = PyDict_CheckExact(young) && PyDict_CheckExact(old);
    if (!PyBytes_CheckExact(data) || !(label_caches || dicts) ||
        !PyTuple_CheckExact(filters) || PyTuple_GET_SIZE(filters) > MAX_DESTINATIONS ||
        !PyTuple_CheckExact(reasons))
        return pure_scan(args, nargs);

    State *s = PyMem_Calloc(1, sizeof(State));
    if (!s) return PyErr_NoMemory();
    PreHash *pre = NULL;
    s->ndest = PyTuple_GET_SIZE(filters);
    Py_ssize_t ndest = s->ndest;
    PyObject *metadata = NULL, *key = NULL, *raw = NULL, *entry = NULL, *rest_obj = NULL;
    long long samples_in = 0, series_in = 0, hits = 0, promoted = 0, promoted_bytes = 0;
    long long misses = 0, miss_bytes = 0; /* misses answered here from a template */
    s->drop_refs = PyList_New(0);
    metadata = PyList_New(0);
    if (!s->drop_refs || !metadata) FAIL;
    for (Py_ssize_t i = 0; i < ndest; i++) {
        int t = PyObject_IsTrue(PyTuple_GET_ITEM(filters, i));
        if (t < 0) FAIL;
        s->filters[i] = t;
    }

    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data), pos = 0;
    /* With LabelCache generations: hash the labels of the leading plain series first, so the
     * main loop can prefetch the slots (and their keys and values) a few series ahead: the
     * lookups then mostly hit the CPU cache instead of waiting on memory one after another. */
    Py_ssize_t npre = label_caches ? prehash(d, end, &pre) : 0;
    if (npre < 0) FAIL;
    Py_ssize_t k = 0; /* index of the series in the request */
    while (pos < end) {
        uint64_t tag, len;
        if (!read_varint(d, &pos, end, &tag)) BAIL;
        uint64_t field = tag >> 3;
        unsigned wire = (unsigned)(tag & 7);
        if (field == 0 || field > MAX_FIELD_NUMBER) BAIL;
        Py_ssize_t vstart = pos, vend;
        if (wire == 2) {
            if (!read_varint(d, &pos, end, &len) || len > (uint64_t)(end - pos)) BAIL;
            vstart = pos;
            vend = pos + (Py_ssize_t)len;
        } else if (wire == 0) {
            if (!skip_varint(d, &pos, end)) BAIL;
            vend = pos;
        } else if (wire == 1 || wire == 5) {
            Py_ssize_t width = wire == 1 ? 8 : 4;
            if (end - pos < width) BAIL;
            vend = pos + width;
        } else {
            BAIL;
        }
        pos = vend;
        if (field != 1 && field != 3) continue;
        if (wire != 2) BAIL;
        if (field == 3) {
            PyObject *start_o = PyLong_FromSsize_t(vstart), *end_o = PyLong_FromSsize_t(vend);
            PyObject *m = NULL;
            if (start_o && end_o)
                m = PyObject_CallFunctionObjArgs(check_metadata_fn, data, start_o, end_o, NULL);
            Py_XDECREF(start_o);
            Py_XDECREF(end_o);
            if (!m) FAIL;
            int r = PyList_Append(metadata, m);
            Py_DECREF(m);
            if (r < 0) FAIL;
            continue;
        }
        series_in++;
        k = series_in - 1;
        Py_ssize_t labels_end = leading_labels_end(d, vstart, vend);
        if (labels_end < 0) BAIL;
        long long nsamples = plain_samples(d, labels_end, vend);
        long long nex = 0, nhist = 0;
        const char *rest;
        Py_ssize_t nrest;
        const char *kp; /* the raw labels: the cache key */
        Py_ssize_t kn;
        /* Labels then plain samples, or labels alone (an empty series too: nothing to send,
           its labels still looked up as split_series + the reference loop do). */
        if (nsamples || labels_end == vend) {
            kp = (const char *)d + vstart;
            kn = labels_end - vstart;
            if (!label_caches) { /* a dict needs a key object */
                key = PyBytes_FromStringAndSize(kp, kn);
                if (!key) FAIL;
            }
            rest = (const char *)d + labels_end;
            nrest = vend - labels_end;
        } else {
            PyObject *ts = PyBytes_FromStringAndSize((const char *)d + vstart, vend - vstart);
            if (!ts) FAIL;
            raw = PyObject_CallOneArg(split_series_fn, ts);
            Py_DECREF(ts);
            if (!raw) FAIL;
            key = PyObject_GetAttr(raw, str_labels);
            rest_obj = PyObject_GetAttr(raw, str_rest);
            if (!key || !rest_obj) FAIL;
            if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(rest_obj)) {
                PyErr_SetString(PyExc_TypeError, "split_series must give bytes");
                FAIL;
            }
            nsamples = attr_int(raw, str_samples);
            nex = attr_int(raw, str_exemplars);
            nhist = attr_int(raw, str_histograms);
            if (PyErr_Occurred()) FAIL;
            rest = PyBytes_AS_STRING(rest_obj);
            nrest = PyBytes_GET_SIZE(rest_obj);
            kp = PyBytes_AS_STRING(key);
            kn = PyBytes_GET_SIZE(key);
        }
        /* The routing outcome: young generation, then old (promoted), then a miss. */
        if (label_caches) {
            Digest g;
            if (k < npre && pre[k].start == kp - (const char *)d && pre[k].len == kn)
                g = pre[k].digest;
            else
                g = lc_digest((const uint8_t *)kp, kn);
            if (k + PREFETCH_SLOTS < npre)
                lc_prefetch_slot((LabelCache *)young, pre[k + PREFETCH_SLOTS].digest);
            if (k + PREFETCH_OBJECTS < npre)
                lc_prefetch_objects((LabelCache *)young, pre[k + PREFETCH_OBJECTS].digest);
            entry = lc_lookup((LabelCache *)young, g);
            if (entry) {
                Py_INCREF(entry);
                hits++;
            } else if ((entry = lc_lookup((LabelCache *)old, g))) {
                Py_INCREF(entry);
                hits++;
                if (lc_insert((LabelCache *)young, g, entry) < 0) FAIL;
                promoted++;
                promoted_bytes += kn + PyBytes_GET_SIZE(entry);
            } else {
                int made = use_templates && kn > 0
                               ? template_entry(kp, kn, names, templates, legacy, &entry) : 0;
                if (made < 0) FAIL;
                if (made) {
                    if (lc_insert((LabelCache *)young, g, entry) < 0) FAIL;
                    misses++;
                    miss_bytes += kn + PyBytes_GET_SIZE(entry);
                } else {
                    if (!key) {
                        key = PyBytes_FromStringAndSize(kp, kn);
                        if (!key) FAIL;
                    }
                    entry = PyObject_CallOneArg(miss, key);
                    if (!entry) FAIL;
                }
            }
        } else if ((entry = PyDict_GetItemWithError(young, key))) {
            Py_INCREF(entry);
            hits++;
        } else if (PyErr_Occurred()) {
            FAIL;
        } else {
            entry = PyDict_GetItemWithError(old, key);
            if (entry) {
                Py_INCREF(entry);
                hits++;
                if (!PyBytes_CheckExact(entry)) {
                    PyErr_SetString(PyExc_TypeError, "cache entries must be bytes");
                    FAIL;
                }
                if (PyDict_SetItem(young, key, entry) < 0) FAIL;
                promoted++;
                promoted_bytes += entry_bytes(key, entry);
            } else if (PyErr_Occurred()) {
                FAIL;
            } else {
                entry = PyObject_CallOneArg(miss, key);
                if (!entry) FAIL;
            }
        }
        if (!PyBytes_CheckExact(entry)) {
            PyErr_SetString(PyExc_TypeError, "a cache entry must be bytes");
            FAIL;
        }
        long long n = nsamples + nex + nhist;
        if (n) {
            samples_in += n;
            const uint8_t *e = (const uint8_t *)PyBytes_AS_STRING(entry);
            Py_ssize_t elen = PyBytes_GET_SIZE(entry), ep = 0;
            for (Py_ssize_t i = 0; i < ndest; i++) {
                if (ep >= elen) {
                    PyErr_SetString(PyExc_ValueError, "a cache entry is shorter than its destinations");
                    FAIL;
                }
                uint8_t kind = e[ep];
                if (kind == 0) { /* not sent, not counted */
                    ep += 1;
                    continue;
                }
                if (kind == 3) { /* dropped: reasons[index] */
                    if (ep + 2 > elen || e[ep + 1] >= PyTuple_GET_SIZE(reasons)) {
                        PyErr_SetString(PyExc_ValueError, "bad drop reason in a cache entry");
                        FAIL;
                    }
                    int r = add_drop(s, i, PyTuple_GET_ITEM(reasons, e[ep + 1]), n);
                    ep += 2;
                    if (r < 0) FAIL;
                    continue;
                }
                const char *labels;
                Py_ssize_t nlabels;
                uint32_t hash;
                if (kind == 1 && ep + 5 <= elen) { /* kept, labels = the key */
                    hash = get_u32(e + ep + 1);
                    labels = kp;
                    nlabels = kn;
                    ep += 5;
                } else if (kind == 2 && ep + 9 <= elen) { /* kept, own labels */
                    hash = get_u32(e + ep + 1);
                    nlabels = (Py_ssize_t)get_u32(e + ep + 5);
                    if (ep + 9 + nlabels > elen) {
                        PyErr_SetString(PyExc_ValueError, "truncated cache entry");
                        FAIL;
                    }
                    labels = (const char *)e + ep + 9;
                    ep += 9 + nlabels;
                } else {
                    PyErr_SetString(PyExc_ValueError, "bad cache entry");
                    FAIL;
                }
                if (s->filters[i] && (nex || nhist)) {
                    PyObject *idx = PyLong_FromSsize_t(i);
                    PyObject *out = idx ? PyObject_CallFunctionObjArgs(filt, idx, raw, NULL) : NULL;
                    Py_XDECREF(idx);
                    if (!out) FAIL;
                    PyObject *frest;
                    long long kept;
                    if (!PyTuple_CheckExact(out) || PyTuple_GET_SIZE(out) != 2 ||
                        !PyBytes_CheckExact((frest = PyTuple_GET_ITEM(out, 0)))) {
                        Py_DECREF(out);
                        PyErr_SetString(PyExc_TypeError, "filt gives (rest, kept)");
                        FAIL;
                    }
                    kept = PyLong_AsLongLong(PyTuple_GET_ITEM(out, 1));
                    if (kept == -1 && PyErr_Occurred()) {
                        Py_DECREF(out);
                        FAIL;
                    }
                    int r = 0;
                    if (!kept)
                        r = add_drop(s, i, str_filtered, n);
                    else
                        r = write_frame(s, i, labels, nlabels, PyBytes_AS_STRING(frest),
                                        PyBytes_GET_SIZE(frest), kept, hash);
                    Py_DECREF(out);
                    if (r < 0) FAIL;
                    continue;
                }
                if (write_frame(s, i, labels, nlabels, rest, nrest, n, hash) < 0) FAIL;
            }
        }
        Py_CLEAR(entry);
        Py_CLEAR(key);
        Py_CLEAR(raw);
        Py_CLEAR(rest_obj);
    }

    /* The result, in scan.Scan field order. */
    PyObject *bodies = PyList_New(ndest), *indexes = PyList_New(ndest);
    PyObject *samples = PyList_New(ndest), *series = PyList_New(ndest);
    PyObject *dropped = PyDict_New();
    PyObject *result = NULL;
    if (!bodies || !indexes || !samples || !series || !dropped) goto build_fail;
    for (Py_ssize_t i = 0; i < ndest; i++) {
        PyObject *b = PyBytes_FromStringAndSize(s->bodies[i].data, s->bodies[i].len);
        PyObject *x = PyBytes_FromStringAndSize(s->indexes[i].data, s->indexes[i].len);
        PyObject *a = PyLong_FromLongLong(s->samples[i]);
        PyObject *e = PyLong_FromLongLong(s->series[i]);
        if (!b || !x || !a || !e) {
            Py_XDECREF(b);
            Py_XDECREF(x);
            Py_XDECREF(a);
            Py_XDECREF(e);
            goto build_fail;
        }
        PyList_SET_ITEM(bodies, i, b);
        PyList_SET_ITEM(indexes, i, x);
        PyList_SET_ITEM(samples, i, a);
        PyList_SET_ITEM(series, i, e);
    }
    for (Py_ssize_t k = 0; k < s->ndrops; k++) {
        PyObject *dk = Py_BuildValue("(nO)", s->drops[k].dest, s->drops[k].reason);
        if (!dk) goto build_fail;
        PyObject *prev = PyDict_GetItemWithError(dropped, dk);
        long long total = s->drops[k].samples;
        if (prev) total += PyLong_AsLongLong(prev);
        PyObject *v = PyErr_Occurred() ? NULL : PyLong_FromLongLong(total);
        int r = v ? PyDict_SetItem(dropped, dk, v) : -1;
        Py_DECREF(dk);
        Py_XDECREF(v);
        if (r < 0) goto build_fail;
    }
    result = Py_BuildValue("(NNNNNLLNLLLLL)", bodies, indexes, samples, series, dropped,
                           samples_in, series_in, metadata, hits, promoted, promoted_bytes,
                           misses, miss_bytes);
    state_free(s);
    PyMem_Free(s);
    PyMem_Free(pre);
    return result; /* Py_BuildValue "N" stole the references */
build_fail:
    Py_XDECREF(bodies);
    Py_XDECREF(indexes);
    Py_XDECREF(samples);
    Py_XDECREF(series);
    Py_XDECREF(dropped);
    goto fail;

    int bailed;
bail:
    /* Malformed or unusual input: the reference implementation decides (and raises). */
    bailed = 1;
    goto cleanup;
fail:
    bailed = 0;
cleanup:
    Py_XDECREF(entry);
    Py_XDECREF(key);
    Py_XDECREF(raw);
    Py_XDECREF(rest_obj);
    Py_XDECREF(metadata);
    state_free(s);
    PyMem_Free(s);
    PyMem_Free(pre);
    return bailed ? pure_scan(args, nargs) : NULL;
}

/* -- labels ------------------------------------------------------------------------------- */

static PyObject *decode_labels_py_fn; /* rwrouter.wire.codec.decode_labels (the reference) */

static PyObject *pure_decode_labels(PyObject *raw) {
    return PyObject_CallOneArg(decode_labels_py_fn, raw);
}

/* Compiled rwrouter.wire.codec.decode_labels: same result; anything unusual (malformed,
 * invalid UTF-8, empty or repeated names) is handed to the reference, which raises. */
static PyObject *decode_labels(PyObject *module, PyObject *raw) {
    (void)module;
    if (!PyBytes_CheckExact(raw)) return pure_decode_labels(raw);
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(raw);
    Py_ssize_t end = PyBytes_GET_SIZE(raw), pos = 0;
    PyObject *pairs = PyList_New(0);
    if (!pairs) return NULL;
    while (pos < end) {
        uint64_t tag, len;
        if (!read_varint(d, &pos, end, &tag) || tag != 0x0A) goto bail;
        if (!read_varint(d, &pos, end, &len) || len > (uint64_t)(end - pos)) goto bail;
        Py_ssize_t lend = pos + (Py_ssize_t)len;
        Py_ssize_t name_at = -1, name_len = 0, value_at = -1, value_len = 0;
        while (pos < lend) {
            uint64_t t, n;
            if (!read_varint(d, &pos, lend, &t)) goto bail;
            uint64_t f = t >> 3;
            unsigned w = (unsigned)(t & 7);
            if (f == 0 || f > MAX_FIELD_NUMBER) goto bail;
            if (w == 2) {
                if (!read_varint(d, &pos, lend, &n) || n > (uint64_t)(lend - pos)) goto bail;
                /* A repeated name or value field: the reference checks the UTF-8 of every
                 * occurrence (the last one counts), so it decides. */
                if ((f == 1 && name_at >= 0) || (f == 2 && value_at >= 0)) goto bail;
                if (f == 1) {
                    name_at = pos;
                    name_len = (Py_ssize_t)n;
                } else if (f == 2) {
                    value_at = pos;
                    value_len = (Py_ssize_t)n;
                }
                pos += (Py_ssize_t)n;
            } else if (f == 1 || f == 2) {
                goto bail;
            } else if (w == 0) {
                if (!read_varint(d, &pos, lend, &n)) goto bail;
            } else if (w == 1 || w == 5) {
                Py_ssize_t width = w == 1 ? 8 : 4;
                if (lend - pos < width) goto bail;
                pos += width;
            } else {
                goto bail;
            }
        }
        if (name_at < 0 || name_len == 0) goto bail; /* empty name: the reference says so */
        PyObject *name = PyUnicode_DecodeUTF8((const char *)d + name_at, name_len, "strict");
        PyObject *value = value_at < 0 ? PyUnicode_New(0, 0)
                                       : PyUnicode_DecodeUTF8((const char *)d + value_at, value_len, "strict");
        if (!name || !value) {
            Py_XDECREF(name);
            Py_XDECREF(value);
            PyErr_Clear();
            goto bail;
        }
        PyObject *pair = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (!pair || PyList_Append(pairs, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(pairs);
            return NULL;
        }
        Py_DECREF(pair);
    }
    if (PyList_Sort(pairs) < 0) {
        Py_DECREF(pairs);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(pairs), kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (i > 0) {
            int same = PyUnicode_Compare(PyTuple_GET_ITEM(pair, 0),
                                         PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i - 1), 0));
            if (same == 0) goto bail; /* a repeated name */
        }
        if (PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(pair, 1))) kept++;
    }
    PyObject *out = PyTuple_New(kept);
    if (!out) {
        Py_DECREF(pairs);
        return NULL;
    }
    for (Py_ssize_t i = 0, j = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(pair, 1))) continue; /* empty = absent */
        Py_INCREF(pair);
        PyTuple_SET_ITEM(out, j++, pair);
    }
    Py_DECREF(pairs);
    return out;
bail:
    Py_DECREF(pairs);
    return pure_decode_labels(raw);
}

/* Compiled rwrouter.wire.codec.encode_labels: the Label fields of a TimeSeries. */
static PyObject *encode_labels(PyObject *module, PyObject *labels) {
    (void)module;
    /* Other iterables (which a first pass would consume) and other label shapes: the
     * reference, which gives its result or its error. */
    if (!PyTuple_CheckExact(labels) && !PyList_CheckExact(labels))
        return call_reference("rwrouter.wire.codec", "encode_labels", &labels, 1);
    int other = 0;
    PyObject *seq = PySequence_Fast(labels, "labels must be a sequence of (name, value)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    const char **names = NULL, **values = NULL;
    Py_ssize_t *nlen = NULL, *vlen = NULL;
    PyObject *out = NULL;
    if (n) {
        names = PyMem_Malloc(sizeof(char *) * (size_t)n);
        values = PyMem_Malloc(sizeof(char *) * (size_t)n);
        nlen = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
        vlen = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n);
        if (!names || !values || !nlen || !vlen) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)) ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 1))) {
            other = 1;
            goto done;
        }
        names[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &nlen[i]);
        if (!names[i]) goto done;
        values[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 1), &vlen[i]);
        if (!values[i]) goto done;
        Py_ssize_t inner = 1 + varint_size((uint64_t)nlen[i]) + nlen[i] + 1 +
                           varint_size((uint64_t)vlen[i]) + vlen[i];
        total += 1 + varint_size((uint64_t)inner) + inner;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t inner = 1 + varint_size((uint64_t)nlen[i]) + nlen[i] + 1 +
                           varint_size((uint64_t)vlen[i]) + vlen[i];
        *p++ = 0x0A;
        p = put_varint(p, (uint64_t)inner);
        *p++ = 0x0A;
        p = put_varint(p, (uint64_t)nlen[i]);
        memcpy(p, names[i], (size_t)nlen[i]);
        p += nlen[i];
        *p++ = 0x12;
        p = put_varint(p, (uint64_t)vlen[i]);
        memcpy(p, values[i], (size_t)vlen[i]);
        p += vlen[i];
    }
done:
    PyMem_Free(names);
    PyMem_Free(values);
    PyMem_Free(nlen);
    PyMem_Free(vlen);
    Py_DECREF(seq);
    if (other) return call_reference("rwrouter.wire.codec", "encode_labels", &labels, 1);
    return out;
}

/* -- canonical label sets ---------------------------------------------------------------------- */

/* rwrouter.routing.scan.signature_py (the reference), for arguments of other types. */
static PyObject *pure_signature(PyObject *const *args, Py_ssize_t nargs) {
    return call_reference("rwrouter.routing.scan", "signature_py", args, nargs);
}

/* Compiled rwrouter.routing.scan.signature_py: the values of ``names`` (sorted bytes) in a
 * canonical label set, or None when the set is not canonical. */
static PyObject *signature(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if ((nargs != 2 && nargs != 3) || !PyBytes_CheckExact(args[0]) ||
        !PyTuple_CheckExact(args[1]) || (nargs == 3 && !PyBool_Check(args[2])))
        return pure_signature(args, nargs);
    PyObject *names = args[1];
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(names, k)))
            return pure_signature(args, nargs);
    return signature_values((const uint8_t *)PyBytes_AS_STRING(args[0]),
                            PyBytes_GET_SIZE(args[0]), names, nargs == 3 && args[2] == Py_True);
}

/* Whether s[0:n] (n > 0) is a legacy name: [a-zA-Z_][a-zA-Z0-9_]*, with ':' too when colon
 * (a metric name). */
static int legacy_name(const uint8_t *s, uint64_t n, int colon) {
    if (s[0] >= '0' && s[0] <= '9') return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || (colon && c == ':')))
            return 0;
    }
    return 1;
}

/* The values of ``names`` (a tuple of bytes, sorted) in the canonical label set d[0:end], or
 * None when it is not canonical (see signature_py; legacy: legacy names only). */
static PyObject *signature_values(const uint8_t *d, Py_ssize_t end, PyObject *names,
                                  int legacy) {
    Py_ssize_t pos = 0, nnames = PyTuple_GET_SIZE(names);
    PyObject *values = PyTuple_New(nnames);
    if (!values) return NULL;
    for (Py_ssize_t k = 0; k < nnames; k++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(values, k, Py_None);
    }
    const uint8_t *prev = NULL;
    Py_ssize_t prev_len = 0, next_name = 0;
    while (pos < end) {
        uint64_t len, nlen, vlen;
        Py_ssize_t at;
        if (d[pos] != 0x0A) goto no;
        pos++;
        at = pos;
        if (!read_varint(d, &pos, end, &len) || pos - at != varint_size(len)) goto no;
        if (len > (uint64_t)(end - pos)) goto no;
        Py_ssize_t lend = pos + (Py_ssize_t)len;
        if (pos >= lend || d[pos] != 0x0A) goto no;
        pos++;
        at = pos;
        if (!read_varint(d, &pos, lend, &nlen) || pos - at != varint_size(nlen)) goto no;
        if (nlen == 0 || nlen > (uint64_t)(lend - pos)) goto no;
        const uint8_t *name = d + pos;
        pos += (Py_ssize_t)nlen;
        if (pos >= lend || d[pos] != 0x12) goto no;
        pos++;
        at = pos;
        if (!read_varint(d, &pos, lend, &vlen) || pos - at != varint_size(vlen)) goto no;
        if (vlen == 0 || (uint64_t)(lend - pos) != vlen) goto no;
        const uint8_t *value = d + pos;
        pos = lend;
        for (uint64_t i = 0; i < nlen; i++)
            if (name[i] >= 0x80) goto no;
        for (uint64_t i = 0; i < vlen; i++)
            if (value[i] >= 0x80) goto no;
        if (legacy && (!legacy_name(name, nlen, 0) ||
                       (nlen == 8 && !memcmp(name, "__name__", 8) && !legacy_name(value, vlen, 1))))
            goto no;
        if (prev) { /* strictly increasing names */
            Py_ssize_t m = prev_len < (Py_ssize_t)nlen ? prev_len : (Py_ssize_t)nlen;
            int c = memcmp(prev, name, (size_t)m);
            if (c > 0 || (c == 0 && prev_len >= (Py_ssize_t)nlen)) goto no;
        }
        prev = name;
        prev_len = (Py_ssize_t)nlen;
        /* names wanted, in order */
        while (next_name < nnames) {
            PyObject *want = PyTuple_GET_ITEM(names, next_name);
            Py_ssize_t wl = PyBytes_GET_SIZE(want);
            Py_ssize_t m = wl < (Py_ssize_t)nlen ? wl : (Py_ssize_t)nlen;
            int c = memcmp(PyBytes_AS_STRING(want), name, (size_t)m);
            if (c < 0 || (c == 0 && wl < (Py_ssize_t)nlen)) { /* wanted name absent */
                next_name++;
                continue;
            }
            if (c == 0 && wl == (Py_ssize_t)nlen) {
                PyObject *v = PyBytes_FromStringAndSize((const char *)value, (Py_ssize_t)vlen);
                if (!v) {
                    Py_DECREF(values);
                    return NULL;
                }
                PyObject *old_value = PyTuple_GET_ITEM(values, next_name);
                PyTuple_SET_ITEM(values, next_name, v);
                Py_DECREF(old_value);
                next_name++;
            }
            break;
        }
    }
    return values;
no:
    Py_DECREF(values);
    Py_RETURN_NONE;
}

/* -- queue side: frames by shard -------------------------------------------------------------- */

/* Compiled rwrouter.wire.index.index_totals_py: (frame bytes, samples) over an index. */
static PyObject *index_totals(PyObject *module, PyObject *index) {
    (void)module;
    if (!PyBytes_CheckExact(index)) /* e.g. a bytearray: the reference */
        return call_reference("rwrouter.wire.index", "index_totals_py", &index, 1);
    const uint8_t *x = (const uint8_t *)PyBytes_AS_STRING(index);
    Py_ssize_t n = PyBytes_GET_SIZE(index);
    if (n % 12) {
        PyErr_SetString(PyExc_ValueError, "index length is not a multiple of 12");
        return NULL;
    }
    long long nbytes = 0, samples = 0;
    for (Py_ssize_t i = 0; i < n; i += 12) {
        nbytes += get_u32(x + i);
        samples += get_u32(x + i + 4);
    }
    return Py_BuildValue("(LL)", nbytes, samples);
}

/* hash % shards for any shards >= 1 (a u32 hash is its own shard past 2^32 - 1). */
static inline Py_ssize_t shard_of(uint32_t hash, Py_ssize_t shards) {
    return (uint64_t)shards > UINT32_MAX ? (Py_ssize_t)hash : (Py_ssize_t)(hash % (uint32_t)shards);
}

/* Compiled rwrouter.wire.index.split_shards_py: the frames of (body, index) by shard
 * (hash % shards), in order; per shard (body, index, samples, series). */
static PyObject *split_shards(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        !PyLong_CheckExact(args[2])) /* other types: the reference */
        return call_reference("rwrouter.wire.index", "split_shards_py", args, nargs);
    Py_ssize_t shards = PyLong_AsSsize_t(args[2]);
    if (shards == -1 && PyErr_Occurred()) return NULL;
    if (shards < 1) {
        PyErr_SetString(PyExc_ValueError, "shards must be at least 1");
        return NULL;
    }
    const char *body = PyBytes_AS_STRING(args[0]);
    const uint8_t *x = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t nbody = PyBytes_GET_SIZE(args[0]), nindex = PyBytes_GET_SIZE(args[1]);
    if (nindex % 12) {
        PyErr_SetString(PyExc_ValueError, "index length is not a multiple of 12");
        return NULL;
    }
    /* The per-shard arrays below (and the result list) could not be allocated: the
     * reference runs out of memory too. */
    if ((size_t)shards > (size_t)PY_SSIZE_T_MAX / (4 * sizeof(Py_ssize_t))) return PyErr_NoMemory();
    /* First pass: sizes per shard, and the index must cover the body exactly. */
    Py_ssize_t *sizes = PyMem_Calloc((size_t)shards * 4, sizeof(Py_ssize_t));
    if (!sizes) return PyErr_NoMemory();
    Py_ssize_t *counts = sizes + shards, *samples = sizes + 2 * shards, *pos = sizes + 3 * shards;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < nindex; i += 12) {
        Py_ssize_t s = shard_of(get_u32(x + i + 8), shards);
        sizes[s] += get_u32(x + i);
        samples[s] += get_u32(x + i + 4);
        counts[s] += 1;
        total += get_u32(x + i);
    }
    PyObject *out = NULL;
    if (total != nbody) {
        PyErr_SetString(PyExc_ValueError, "index does not match its body");
        goto done;
    }
    out = PyList_New(shards);
    if (!out) goto done;
    PyObject **bodies = PyMem_Calloc((size_t)shards * 2, sizeof(PyObject *));
    if (!bodies) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto done;
    }
    PyObject **indexes = bodies + shards;
    for (Py_ssize_t s = 0; s < shards; s++) {
        bodies[s] = PyBytes_FromStringAndSize(NULL, sizes[s]);
        indexes[s] = PyBytes_FromStringAndSize(NULL, counts[s] * 12);
        if (!bodies[s] || !indexes[s]) goto fail;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < nindex; i += 12) {
        Py_ssize_t s = shard_of(get_u32(x + i + 8), shards);
        uint32_t len = get_u32(x + i);
        memcpy(PyBytes_AS_STRING(bodies[s]) + pos[s], body + at, len);
        at += len;
        pos[s] += len;
    }
    /* Index entries, in order per shard. */
    for (Py_ssize_t s = 0; s < shards; s++) counts[s] = 0;
    for (Py_ssize_t i = 0; i < nindex; i += 12) {
        Py_ssize_t s = shard_of(get_u32(x + i + 8), shards);
        memcpy(PyBytes_AS_STRING(indexes[s]) + counts[s] * 12, x + i, 12);
        counts[s] += 1;
    }
    for (Py_ssize_t s = 0; s < shards; s++) {
        PyObject *t = Py_BuildValue("(NNnn)", bodies[s], indexes[s], samples[s], counts[s]);
        bodies[s] = indexes[s] = NULL;
        if (!t) goto fail;
        PyList_SET_ITEM(out, s, t);
    }
    PyMem_Free(bodies);
    goto done;
fail:
    for (Py_ssize_t s = 0; s < shards; s++) {
        Py_XDECREF(bodies[s]);
        Py_XDECREF(indexes[s]);
    }
    PyMem_Free(bodies);
    Py_CLEAR(out);
done:
    PyMem_Free(sizes);
    return out;
}

#include "_pbwalk.h" /* pb_next, pb_reserve: shared by the two below */
#include "_rw2in.h" /* rw2_to_rw1: remote write 2.0 in (rwrouter.wire.rw2_in) */
#include "_rw2out.h" /* encode_v2, strip_start_timestamps: remote write 2.0 out */

static PyMethodDef methods[] = {
    {"scan_request", (PyCFunction)(void (*)(void))scan_request, METH_FASTCALL,
     "Compiled rwrouter.routing.scan.scan_request_py (same arguments, same result)."},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "Compiled rwrouter.routing.scan.signature_py."},
    {"index_totals", (PyCFunction)index_totals, METH_O,
     "Compiled rwrouter.wire.index.index_totals_py."},
    {"split_shards", (PyCFunction)(void (*)(void))split_shards, METH_FASTCALL,
     "Compiled rwrouter.wire.index.split_shards_py."},
    {"decode_labels", (PyCFunction)decode_labels, METH_O,
     "Compiled rwrouter.wire.codec.decode_labels (same result, same errors)."},
    {"encode_labels", (PyCFunction)encode_labels, METH_O,
     "Compiled rwrouter.wire.codec.encode_labels (same result)."},
    {"rw2_to_rw1", (PyCFunction)(void (*)(void))rw2_to_rw1, METH_FASTCALL,
     "Compiled rwrouter.wire.rw2_in.to_rw1_py (same result, same errors)."},
    {"encode_v2", (PyCFunction)(void (*)(void))encode_v2, METH_FASTCALL,
     "Compiled rwrouter.wire.rw2_out.encode_request_py (same arguments, same result)."},
    {"strip_start_timestamps", (PyCFunction)strip_start_timestamps, METH_O,
     "Compiled rwrouter.wire.rw2_out.strip_start_timestamps_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_scan", "Compiled per-series loop of rwrouter's receive path.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *codec = PyImport_ImportModule("rwrouter.wire.codec");
    if (!codec) return NULL;
    split_series_fn = PyObject_GetAttrString(codec, "split_series");
    decode_labels_py_fn = PyObject_GetAttrString(codec, "decode_labels");
    Py_DECREF(codec);
    PyObject *zlib_module = PyImport_ImportModule("zlib");
    if (!zlib_module) return NULL;
    crc32_fn = PyObject_GetAttrString(zlib_module, "crc32");
    Py_DECREF(zlib_module);
    if (!crc32_fn) return NULL;
    PyObject *validate = PyImport_ImportModule("rwrouter.wire.validate");
    if (!validate) return NULL;
    check_metadata_fn = PyObject_GetAttrString(validate, "check_metadata");
    Py_DECREF(validate);
    str_filtered = PyUnicode_InternFromString("filtered");
    str_labels = PyUnicode_InternFromString("labels");
    str_rest = PyUnicode_InternFromString("rest");
    str_samples = PyUnicode_InternFromString("samples");
    str_exemplars = PyUnicode_InternFromString("exemplars");
    str_histograms = PyUnicode_InternFromString("histograms");
    if (!split_series_fn || !decode_labels_py_fn || !check_metadata_fn || !str_filtered || !str_labels || !str_rest ||
        !str_samples || !str_exemplars || !str_histograms)
        return NULL;
    if (PyType_Ready(&LabelCacheType) < 0) return NULL;
    /* Per-process random seeds of the cache digest (os.urandom). */
    PyObject *os_module = PyImport_ImportModule("os");
    PyObject *random_bytes = os_module ? PyObject_CallMethod(os_module, "urandom", "i", 16) : NULL;
    Py_XDECREF(os_module);
    if (!random_bytes) return NULL;
    if (PyBytes_Check(random_bytes) && PyBytes_GET_SIZE(random_bytes) == 16) {
        memcpy(&lc_seed1, PyBytes_AS_STRING(random_bytes), 8);
        memcpy(&lc_seed2, PyBytes_AS_STRING(random_bytes) + 8, 8);
    }
    Py_DECREF(random_bytes);
    PyObject *module = PyModule_Create(&moduledef);
    if (!module) return NULL;
    Py_INCREF(&LabelCacheType);
    if (PyModule_AddObject(module, "LabelCache", (PyObject *)&LabelCacheType) < 0) {
        Py_DECREF(&LabelCacheType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
