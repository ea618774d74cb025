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
 *   - a label set not in the cache: the caller's ``miss`` callable, unless the template
 *     shortcut or the plan routes it here; then, when it is kept at a destination the
 *     caller reviews (a series budget), the caller's ``review`` callable decides it;
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

/* 32 or 64 bytes copied as 16-byte vector moves (GCC and Clang vector extensions: SSE2 on
 * x86-64, NEON on arm64). A memcpy of that constant size is not always that: where GCC judges
 * the block cold it emits `rep movs`, microcoded, tens of cycles a copy. The caller has the
 * room (the hot copies overrun their field on purpose, within reserved bytes). */
typedef uint8_t Vec16 __attribute__((vector_size(16), aligned(1), may_alias));

static inline __attribute__((always_inline)) void copy32(char *to, const char *from) {
    Vec16 a = *(const Vec16 *)from, b = *(const Vec16 *)(from + 16);
    *(Vec16 *)to = a;
    *(Vec16 *)(to + 16) = b;
}

static inline __attribute__((always_inline)) void copy64(char *to, const char *from) {
    Vec16 a = *(const Vec16 *)from, b = *(const Vec16 *)(from + 16);
    Vec16 c = *(const Vec16 *)(from + 32), d = *(const Vec16 *)(from + 48);
    *(Vec16 *)to = a;
    *(Vec16 *)(to + 16) = b;
    *(Vec16 *)(to + 32) = c;
    *(Vec16 *)(to + 48) = d;
}

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    PyObject *obj; /* the bytes object data lives in (a share body, handed over without a
                    * copy: buf_bytes), or NULL: data is PyMem memory */
} Buf;

/* Room for `extra` more bytes: 0 ok, -1 MemoryError. The buffer is allocated by the first call
 * even for 0 bytes, so its data is never NULL once grown (memcpy from or to a NULL pointer is
 * undefined behaviour even for 0 bytes, e.g. an empty series' labels). */
static int buf_grow(Buf *b, Py_ssize_t extra) {
    if (b->data && b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    if (b->obj) { /* the only reference: resizable in place (freed, NULL, on failure) */
        if (_PyBytes_Resize(&b->obj, cap) < 0) {
            b->data = NULL;
            b->len = b->cap = 0;
            return -1;
        }
        b->data = PyBytes_AS_STRING(b->obj);
        b->cap = cap;
        return 0;
    }
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

/* Short byte strings compared inline, 8 bytes a step (the label names and values of the miss
 * path: each a call into the C library's memcmp cost more than the compare itself). */
static inline uint64_t load64(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The n < 8 bytes at p as a little-endian word (the rest zero), in at most three loads. */
static inline uint64_t load_short(const char *p, Py_ssize_t n) {
    uint64_t w = 0;
    uint32_t w4;
    uint16_t w2;
    Py_ssize_t i = 0;
    if (n & 4) {
        memcpy(&w4, p, 4);
        w = w4;
        i = 4;
    }
    if (n & 2) {
        memcpy(&w2, p + i, 2);
        w |= (uint64_t)w2 << (8 * i);
        i += 2;
    }
    if (n & 1) w |= (uint64_t)(uint8_t)p[i] << (8 * i);
    return w;
}

/* Whether a[0:n] == b[0:n]. */
static inline int bytes_eq(const char *a, const char *b, Py_ssize_t n) {
    if (n >= 8) {
        Py_ssize_t i = 0;
        for (; i + 8 < n; i += 8)
            if (load64(a + i) != load64(b + i)) return 0;
        return load64(a + n - 8) == load64(b + n - 8); /* the last 8, overlapping */
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* memcmp(a, b, n): the sign of the first differing byte (unsigned), 0 when equal. */
static inline int bytes_cmp(const char *a, const char *b, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        if (load64(a + i) != load64(b + i)) break;
    for (; i < n; i++)
        if (a[i] != b[i]) return (uint8_t)a[i] < (uint8_t)b[i] ? -1 : 1;
    return 0;
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

#include "_pbwalk.h" /* pb_next, pb_reserve: the field walker of scan_request and RW 2.0 */

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

/* An empty, unallocated ``b`` made a buffer of ``cap`` bytes inside a new bytes object, which
 * bufs_list hands over as it is: 0, or -1 with an exception set. */
static int buf_bytes(Buf *b, Py_ssize_t cap) {
    b->obj = PyBytes_FromStringAndSize(NULL, cap); /* not zeroed: written before it is read */
    if (!b->obj) return -1;
    b->data = PyBytes_AS_STRING(b->obj);
    b->len = 0;
    b->cap = cap;
    return 0;
}

static void state_free(State *s) {
    for (Py_ssize_t i = 0; i < s->ndest; i++) {
        if (s->bodies[i].obj) Py_CLEAR(s->bodies[i].obj);
        else PyMem_Free(s->bodies[i].data);
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

/* Destination i's index entry for a frame of ``frame`` bytes just written (room for it
 * grown by the caller), and its counts. */
static inline void add_index(State *s, Py_ssize_t i, Py_ssize_t frame, long long kept,
                             uint32_t hash) {
    char *q = s->indexes[i].data + s->indexes[i].len;
    q = put_u32(q, (uint32_t)frame);
    q = put_u32(q, (uint32_t)kept);
    put_u32(q, hash);
    s->indexes[i].len += 12;
    s->samples[i] += kept;
    s->series[i] += 1;
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
    if (labels + nlabels == rest) { /* the labels and the rest adjacent: one copy */
        memcpy(p, labels, (size_t)inner);
    } else {
        memcpy(p, labels, (size_t)nlabels);
        memcpy(p + nlabels, rest, (size_t)nrest);
    }
    b->len += frame;
    add_index(s, i, frame, kept, hash);
    return 0;
}

/* write_frame of a series field whose bytes are already what write_frame would write
 * (frame[0:n]: tag, minimal length, the labels kept, the rest): copied whole. */
static int write_field(State *s, Py_ssize_t i, const char *frame, Py_ssize_t n, long long kept,
                       uint32_t hash) {
    Buf *b = &s->bodies[i];
    if (buf_grow(b, n) < 0 || buf_grow(&s->indexes[i], 12) < 0) return -1;
    memcpy(b->data + b->len, frame, (size_t)n);
    b->len += n;
    add_index(s, i, n, kept, hash);
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

/* module.name (imported when it is not yet): a new reference, or NULL. */
static PyObject *import_attr(const char *modname, const char *name) {
    PyObject *mod = PyImport_ImportModule(modname);
    if (!mod) return NULL;
    PyObject *attr = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return attr;
}

/* A reference function (module.name) on these arguments: the compiled functions hand it what
 * they do not take themselves, so it gives the result or raises the reference error. */
static PyObject *call_reference(const char *modname, const char *name, PyObject *const *args,
                                Py_ssize_t nargs) {
    PyObject *fn = import_attr(modname, name);
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

#if defined(RWROUTER_ISAL) /* setup.py links ISA-L when its header is there */
#include <isa-l/crc.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RWROUTER_X86_AVX_STATE 1
static int cpu_has_avx; /* set at import: the CPU (and the OS) run AVX instructions */

/* ISA-L's AVX-512 CRC-32 (crc32_gzip_refl_by16_10, taken for 256 bytes and more) returns with
 * the upper halves of the vector registers in use (no vzeroupper). Until they are cleared,
 * every switch between legacy SSE code (CPython, this file: x86-64 baseline) and AVX code
 * (glibc's memcpy, memset, strlen, ...) costs the CPU a state transition on Intel cores: the
 * whole process ran about 30 % slower (bench/RESULTS.md, 2026-12-06). vzeroupper after each
 * call clears them (an AVX instruction: only where the CPU has AVX, as ISA-L's own
 * dispatcher only takes its AVX code there). */
static inline void clear_upper_state(void) {
    if (cpu_has_avx) __asm__ volatile("vzeroupper" ::: "memory");
}
#else
static inline void clear_upper_state(void) {}
#endif

/* routing.shard_hash of raw labels: ISA-L's gzip CRC-32 (carry-less multiply; the values of
 * zlib's crc32 and Python's zlib.crc32, about 7x faster on a 200-byte label set). 0 and *h. */
static int shard_hash(const char *kp, Py_ssize_t kn, uint32_t *h) {
    *h = crc32_gzip_refl(0, (const unsigned char *)kp, (uint64_t)kn); /* a 64-bit length */
    clear_upper_state();
    return 0;
}

/* crc32(data): zlib.crc32(data) of a bytes-like object, by ISA-L (the queue records'
 * checksums); the GIL is released past 5 KiB, as zlib.crc32 does. */
static PyObject *crc32_isal(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    if (view.len > 5 * 1024) {
        Py_BEGIN_ALLOW_THREADS;
        shard_hash(view.buf, view.len, &crc);
        Py_END_ALLOW_THREADS;
    } else {
        shard_hash(view.buf, view.len, &crc);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}
#elif defined(RWROUTER_ZLIB) /* else zlib, when its header is there */
#include <zlib.h>

/* routing.shard_hash of raw labels: zlib's crc32 (what zlib.crc32 computes). 0 and *h. */
static int shard_hash(const char *kp, Py_ssize_t kn, uint32_t *h) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (kn > 0) { /* crc32 takes a uInt length */
        uInt step = kn > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)kn;
        crc = crc32(crc, (const Bytef *)kp, step);
        kp += step;
        kn -= (Py_ssize_t)step;
    }
    *h = (uint32_t)crc;
    return 0;
}
#else

/* routing.shard_hash of raw labels (zlib.crc32): 0 and *h, or -1 with an exception set. */
static int shard_hash(const char *kp, Py_ssize_t kn, uint32_t *h) {
    PyObject *view = PyMemoryView_FromMemory((char *)kp, kn, PyBUF_READ);
    if (!view) return -1;
    PyObject *crc = PyObject_CallOneArg(crc32_fn, view);
    Py_DECREF(view);
    if (!crc) return -1;
    unsigned long v = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    *h = (uint32_t)v;
    return 0;
}
#endif

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
    uint32_t h = 0;
    PyObject *entry = NULL;
    if (shard_hash(kp, kn, &h) < 0 || !(entry = PyBytes_FromStringAndSize(NULL, total))) goto done;
    char *p = PyBytes_AS_STRING(entry);
    for (Py_ssize_t i = 0; i < nparts; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        if (i) p = put_u32(p, h);
        memcpy(p, PyBytes_AS_STRING(part), (size_t)PyBytes_GET_SIZE(part));
        p += PyBytes_GET_SIZE(part);
    }
    *out = entry;
done:
    Py_DECREF(parts);
    return entry ? 1 : -1;
}

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
    Digest digest;
    Py_ssize_t start, len;  /* the raw labels of a plain series: d[start:start+len] */
    Py_ssize_t field, vend; /* the series field d[field:vend] (tag, length, value) */
    Py_ssize_t nsamples;    /* plain_samples of what follows the labels */
} PreHash;

#define PREFETCH_OBJECTS 4 /* series ahead whose outcome is prefetched */

static inline void lc_prefetch_slot(LabelCache *c, Digest g) {
    __builtin_prefetch(&c->slots[g.h1 & (uint64_t)c->mask]);
}

static inline void lc_prefetch_objects(LabelCache *c, Digest g) {
    LCSlot *slot = &c->slots[g.h1 & (uint64_t)c->mask];
    if (!lc_inline_len(slot) && slot->v.obj) __builtin_prefetch(PyBytes_AS_STRING(slot->v.obj));
}

/* The leading series of a request whose framing is the usual one (stops at the first anything
 * else: the main loop then takes the rest field by field), each found, its labels hashed and
 * its slots in the cache generations prefetched: by the time the main loop looks them up, they
 * are in the CPU cache. Returns how many, or -1 on MemoryError; *out gets a PyMem array the
 * caller frees, *stop where the first field not taken starts. */
static Py_ssize_t prehash(const uint8_t *d, Py_ssize_t end, LabelCache *young, LabelCache *old,
                          PreHash **out, Py_ssize_t *stop) {
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
        PreHash *h = &pre[n++];
        h->digest = lc_digest(d + at, p - at);
        lc_prefetch_slot(young, h->digest);
        if (old->used) lc_prefetch_slot(old, h->digest);
        h->start = at;
        h->len = p - at;
        h->field = pos;
        h->vend = vend;
        h->nsamples = plain_samples(d, p, vend);
        pos = vend;
    }
    *out = pre;
    *stop = pos;
    return n;
}

/* -- the per-series loop: scan_request in steps -------------------------------------------- */

/* What a step that may meet input it does not take returns. */
#define SCAN_OK 1
#define SCAN_BAIL 0   /* malformed or unusual: the whole request goes to the reference */
#define SCAN_ERR (-1) /* an exception is set */

/* One call of scan_request: its arguments (borrowed), outputs and counters. */
typedef struct {
    PyObject *data, *young, *old, *miss, *filters, *filt, *reasons, *templates, *names;
    PyObject *plan;    /* route_labels' (global_program, routes, drop) for misses, or NULL */
    PyObject *review;  /* review(key, entry) -> entry for a miss made here that a destination
                        * of review_mask keeps, or NULL */
    uint64_t review_mask; /* bit i: destination i's kept series are reviewed */
    int legacy;        /* legacy names only (the template shortcut's signature) */
    int use_templates; /* templates a dict and names a tuple of bytes */
    int label_caches;  /* both generations LabelCache (else both dicts) */
    int folded;        /* the series being routed has a folded digest (scan_rw2, lc_fold) */
    const uint8_t *d;  /* the request's bytes */
    State *s;          /* per-destination outputs and drops (PyMem) */
    PreHash *pre;      /* the leading series, found and hashed (PyMem), npre of them */
    Py_ssize_t npre;
    Py_ssize_t pre_end; /* where the field after them starts */
    PyObject *metadata; /* list: the checked metadata entries */
    long long samples_in, series_in, hits, promoted, promoted_bytes;
    long long misses, miss_bytes; /* misses answered here (a template, the plan); miss_bytes
                                   * also what a folded digest's copy of a miss() answer took */
} Scanner;

/* One series being routed: where its labels and other fields are, and what it holds. */
typedef struct {
    const char *kp; /* the raw labels: the cache key */
    Py_ssize_t kn;
    const char *rest; /* the other fields, sent as they are */
    Py_ssize_t nrest;
    const char *frame; /* the whole series field (tag, length, labels, rest) when a destination
                        * keeping the labels sends exactly its bytes, or NULL */
    Py_ssize_t nframe;
    long long nsamples, nex, nhist;
    PyObject *key;      /* the key as bytes, once made (a dict generation, a miss), or NULL */
    PyObject *raw;      /* codec.split_series' result for an unusual shape, or NULL */
    PyObject *rest_obj; /* raw.rest */
    PyObject *entry;    /* the routing outcome (bytes), or NULL */
    const uint8_t *ep;  /* the outcome's bytes (entry's, or inl), once known */
    Py_ssize_t elen;
    uint8_t inl[LC_INLINE_MAX]; /* an outcome a LabelCache slot held itself, copied */
} Series;

/* Point the series' outcome at t->entry, a bytes object. */
static inline void series_point(Series *t) {
    t->ep = (const uint8_t *)PyBytes_AS_STRING(t->entry);
    t->elen = PyBytes_GET_SIZE(t->entry);
}

/* The series' outcome is t->entry (a miss, a dict generation): check it, point at it. 0, or
 * -1 with an exception set. */
static int series_entry(Series *t) {
    if (!PyBytes_CheckExact(t->entry)) {
        PyErr_SetString(PyExc_TypeError, "a cache entry must be bytes");
        return -1;
    }
    series_point(t);
    return 0;
}

/* The series' outcome is what a LabelCache slot holds (its values are bytes). */
static void series_slot(Series *t, const LCSlot *s) {
    Py_ssize_t n = lc_inline_len(s);
    if (n) {
        memcpy(t->inl, s->v.bytes, (size_t)n);
        t->ep = t->inl;
        t->elen = n;
        return;
    }
    t->entry = Py_NewRef(s->v.obj);
    series_point(t);
}

static void series_clear(Series *t) {
    Py_CLEAR(t->entry);
    Py_CLEAR(t->key);
    Py_CLEAR(t->raw);
    Py_CLEAR(t->rest_obj);
}

/* An empty series: {0} field by field (zeroing the whole struct compiles to a `rep stos`,
 * whose start-up cost showed in the per-series profile). */
static inline void series_init(Series *t) {
    t->kp = t->rest = t->frame = NULL;
    t->ep = NULL;
    t->kn = t->nrest = t->nframe = t->elen = 0;
    t->nsamples = t->nex = t->nhist = 0;
    t->key = t->raw = t->rest_obj = t->entry = NULL;
}

/* series_clear, and the series empty again. */
static inline void series_reset(Series *t) {
    series_clear(t);
    series_init(t);
}

/* The arguments of scan_request_py: SCAN_OK, SCAN_BAIL (types this loop does not take: the
 * reference), SCAN_ERR. */
static int scan_arguments(Scanner *r, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 && nargs != 9 && nargs != 10 && nargs != 11 && nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "scan_request takes 7, 9, 10, 11 or 12 arguments");
        return SCAN_ERR;
    }
    r->data = args[0];
    r->young = args[1];
    r->old = args[2];
    r->miss = args[3];
    r->filters = args[4];
    r->filt = args[5];
    r->reasons = args[6];
    /* The template shortcut (templates dict, names tuple), or None */
    r->templates = nargs >= 9 ? args[7] : Py_None;
    r->names = nargs >= 9 ? args[8] : Py_None;
    r->legacy = nargs >= 10 ? PyObject_IsTrue(args[9]) : 0;
    if (r->legacy < 0) return SCAN_ERR;
    /* The compiled miss path: route_labels(key, *plan) answers a miss instead of miss(key) */
    r->plan = nargs >= 11 && PyTuple_CheckExact(args[10]) && PyTuple_GET_SIZE(args[10]) == 3
                  ? args[10]
                  : NULL;
    /* The review of misses made here: None, or (mask of destinations: int, callable) */
    if (nargs == 12 && args[11] != Py_None) {
        PyObject *review = args[11];
        if (!PyTuple_CheckExact(review) || PyTuple_GET_SIZE(review) != 2 ||
            !PyLong_Check(PyTuple_GET_ITEM(review, 0)) ||
            !PyCallable_Check(PyTuple_GET_ITEM(review, 1))) {
            PyErr_SetString(PyExc_TypeError, "review is None or (mask: int, callable)");
            return SCAN_ERR;
        }
        r->review_mask = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(review, 0));
        if (r->review_mask == (uint64_t)-1 && PyErr_Occurred()) return SCAN_ERR;
        r->review = r->review_mask ? PyTuple_GET_ITEM(review, 1) : NULL;
    }
    r->use_templates = PyDict_CheckExact(r->templates) && PyTuple_CheckExact(r->names);
    for (Py_ssize_t i = 0; r->use_templates && i < PyTuple_GET_SIZE(r->names); i++)
        r->use_templates = PyBytes_CheckExact(PyTuple_GET_ITEM(r->names, i));
    /* The cache generations: both LabelCache (looked up in place), or both dicts. */
    r->label_caches = Py_IS_TYPE(r->young, &LabelCacheType) && Py_IS_TYPE(r->old, &LabelCacheType);
    int dicts = PyDict_CheckExact(r->young) && PyDict_CheckExact(r->old);
    if (!PyBytes_CheckExact(r->data) || !(r->label_caches || dicts) ||
        !PyTuple_CheckExact(r->filters) || PyTuple_GET_SIZE(r->filters) > MAX_DESTINATIONS ||
        !PyTuple_CheckExact(r->reasons))
        return SCAN_BAIL;
    return SCAN_OK;
}

/* The outputs (`room` bytes each), the metadata list, which destinations filter and, when
 * `prehashed` (an RW 1.0 request), the leading series' digests: 0, or -1 with an exception
 * set (scan_free releases what was made). */
static int scan_start(Scanner *r, Py_ssize_t room, int prehashed) {
    r->s = PyMem_Calloc(1, sizeof(State));
    if (!r->s) {
        PyErr_NoMemory();
        return -1;
    }
    r->s->ndest = PyTuple_GET_SIZE(r->filters);
    if (!(r->s->drop_refs = PyList_New(0)) || !(r->metadata = PyList_New(0))) return -1;
    for (Py_ssize_t i = 0; i < r->s->ndest; i++) {
        int t = PyObject_IsTrue(PyTuple_GET_ITEM(r->filters, i));
        if (t < 0) return -1;
        r->s->filters[i] = t;
    }
    r->d = (const uint8_t *)PyBytes_AS_STRING(r->data);
    /* Each share holds at most the request's frames (rules seldom make labels longer; more
     * is grown into): `room` for them now, so the shares are seldom copied to grow. Untouched
     * room costs no memory (the kernel maps pages on first write). */
    for (Py_ssize_t i = 0; i < r->s->ndest; i++)
        if (buf_bytes(&r->s->bodies[i], room) < 0) return -1;
    /* With LabelCache generations: find and hash the leading series first, prefetching each
     * one's slots, so the main loop's lookups mostly hit the CPU cache instead of waiting on
     * memory one after another (the main loop prefetches the outcomes kept as objects). */
    r->npre = prehashed && r->label_caches
                  ? prehash(r->d, PyBytes_GET_SIZE(r->data), (LabelCache *)r->young,
                            (LabelCache *)r->old, &r->pre, &r->pre_end)
                  : 0;
    return r->npre < 0 ? -1 : 0;
}

static void scan_free(Scanner *r) {
    if (r->s) state_free(r->s);
    PyMem_Free(r->s);
    PyMem_Free(r->pre);
    Py_XDECREF(r->metadata);
}

/* A metadata entry data[vstart:vend]: validate.check_metadata's result appended (it raises the
 * reference DecodeError). SCAN_OK or SCAN_ERR. */
static int scan_metadata(Scanner *r, PyObject *data, Py_ssize_t vstart, Py_ssize_t vend) {
    PyObject *start = NULL, *stop = NULL, *m = NULL;
    int step = SCAN_ERR;
    if (!(start = PyLong_FromSsize_t(vstart)) || !(stop = PyLong_FromSsize_t(vend))) goto done;
    m = PyObject_CallFunctionObjArgs(check_metadata_fn, data, start, stop, NULL);
    if (!m || PyList_Append(r->metadata, m) < 0) goto done;
    step = SCAN_OK;
done:
    Py_XDECREF(start);
    Py_XDECREF(stop);
    Py_XDECREF(m);
    return step;
}

/* A series of another shape (exemplars, histograms, interleaved labels, unusual samples):
 * codec.split_series(d[vstart:vend]) gives its labels, other fields and counts. SCAN_OK or
 * SCAN_ERR (what t holds is released by the caller). */
static int series_split(Scanner *r, Py_ssize_t vstart, Py_ssize_t vend, Series *t) {
    PyObject *ts = PyBytes_FromStringAndSize((const char *)r->d + vstart, vend - vstart);
    if (!ts) return SCAN_ERR;
    t->raw = PyObject_CallOneArg(split_series_fn, ts);
    Py_DECREF(ts);
    if (!t->raw) return SCAN_ERR;
    if (!(t->key = PyObject_GetAttr(t->raw, str_labels))) return SCAN_ERR;
    if (!(t->rest_obj = PyObject_GetAttr(t->raw, str_rest))) return SCAN_ERR;
    if (!PyBytes_CheckExact(t->key) || !PyBytes_CheckExact(t->rest_obj)) {
        PyErr_SetString(PyExc_TypeError, "split_series must give bytes");
        return SCAN_ERR;
    }
    if ((t->nsamples = attr_int(t->raw, str_samples)) == -1 && PyErr_Occurred()) return SCAN_ERR;
    if ((t->nex = attr_int(t->raw, str_exemplars)) == -1 && PyErr_Occurred()) return SCAN_ERR;
    if ((t->nhist = attr_int(t->raw, str_histograms)) == -1 && PyErr_Occurred()) return SCAN_ERR;
    t->rest = PyBytes_AS_STRING(t->rest_obj);
    t->nrest = PyBytes_GET_SIZE(t->rest_obj);
    t->kp = PyBytes_AS_STRING(t->key);
    t->kn = PyBytes_GET_SIZE(t->key);
    return SCAN_OK;
}

/* The labels and the other fields of the series d[vstart:vend]: SCAN_OK, SCAN_BAIL
 * (malformed labels), SCAN_ERR. */
static int series_fields(Scanner *r, Py_ssize_t vstart, Py_ssize_t vend, Series *t) {
    const uint8_t *d = r->d;
    Py_ssize_t labels_end = leading_labels_end(d, vstart, vend);
    if (labels_end < 0) return SCAN_BAIL;
    t->nsamples = plain_samples(d, labels_end, vend);
    /* Labels then plain samples, or labels alone (an empty series too: nothing to send, its
     * labels still looked up as split_series + the reference loop do); else split_series. */
    if (!t->nsamples && labels_end != vend) return series_split(r, vstart, vend, t);
    t->kp = (const char *)d + vstart;
    t->kn = labels_end - vstart;
    t->rest = (const char *)d + labels_end;
    t->nrest = vend - labels_end;
    if (!r->label_caches && !(t->key = PyBytes_FromStringAndSize(t->kp, t->kn)))
        return SCAN_ERR; /* a dict needs a key object */
    return SCAN_OK;
}

/* The caller's miss(key) for a label set in neither generation (it caches the outcome itself):
 * 0, or -1 with an exception set. */
static int call_miss(Scanner *r, Series *t) {
    if (!t->key && !(t->key = PyBytes_FromStringAndSize(t->kp, t->kn))) return -1;
    t->entry = PyObject_CallOneArg(r->miss, t->key);
    return t->entry ? 0 : -1;
}

static PyObject *route_labels(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* Whether the entry e[:n] keeps its series (kind 1 or 2) at a destination whose bit is set in
 * mask (bit i: destination i). A malformed entry: 0 (apply_entry reports it). */
static int entry_keeps(const uint8_t *e, Py_ssize_t n, uint64_t mask) {
    Py_ssize_t at = 0;
    for (int i = 0; i < MAX_DESTINATIONS && (mask >> i) && at < n; i++) {
        uint8_t kind = e[at];
        if ((kind == 1 || kind == 2) && (mask >> i & 1)) return 1;
        if (kind == 0)
            at += 1;
        else if (kind == 1)
            at += 5;
        else if (kind == 3)
            at += 2;
        else if (kind == 2 && at + 9 <= n)
            at += 9 + (Py_ssize_t)get_u32(e + at + 5);
        else
            return 0;
    }
    return 0;
}

/* A miss made here (t->entry, bytes): replaced by review(key, entry) when a destination of
 * review_mask keeps the series (a series budget decides it). 0, or -1 with an exception set. */
static int review_miss(Scanner *r, Series *t) {
    if (!r->review || !PyBytes_CheckExact(t->entry) ||
        !entry_keeps((const uint8_t *)PyBytes_AS_STRING(t->entry), PyBytes_GET_SIZE(t->entry),
                     r->review_mask))
        return 0;
    if (!t->key && !(t->key = PyBytes_FromStringAndSize(t->kp, t->kn))) return -1;
    PyObject *decided = PyObject_CallFunctionObjArgs(r->review, t->key, t->entry, NULL);
    if (!decided) return -1;
    Py_SETREF(t->entry, decided);
    return 0;
}

/* A label set in neither LabelCache generation: the template shortcut's entry when it applies,
 * else route_labels' when there is a plan (either reviewed, review_miss, then cached in young
 * here, and counted), else miss() (which decides and caches it itself). 0, or -1 with an
 * exception set. */
static int label_cache_miss(Scanner *r, Digest g, Series *t) {
    int made = r->use_templates && t->kn > 0
                   ? template_entry(t->kp, t->kn, r->names, r->templates, r->legacy, &t->entry)
                   : 0;
    if (made < 0) return -1;
    if (!made && !r->plan) {
        if (call_miss(r, t) < 0) return -1;
        if (!r->folded) return 0;
        /* miss() cached the outcome under the digest of the bytes: under this one too (the
         * first series of a template, a router of its own results: a few) */
        if (series_entry(t) < 0 ||
            lc_insert((LabelCache *)r->young, g, (const char *)t->ep, t->elen, t->entry) < 0)
            return -1;
        r->miss_bytes += t->kn + t->elen;
        return 0;
    }
    if (!made) {
        if (!t->key && !(t->key = PyBytes_FromStringAndSize(t->kp, t->kn))) return -1;
        PyObject *call[4] = {t->key, PyTuple_GET_ITEM(r->plan, 0), PyTuple_GET_ITEM(r->plan, 1),
                             PyTuple_GET_ITEM(r->plan, 2)};
        if (!(t->entry = route_labels(NULL, call, 4))) return -1;
    }
    if (review_miss(r, t) < 0 || series_entry(t) < 0) return -1;
    if (lc_insert((LabelCache *)r->young, g, (const char *)t->ep, t->elen, t->entry) < 0)
        return -1;
    r->misses++;
    r->miss_bytes += t->kn + t->elen;
    return 0;
}

/* The routing outcome from LabelCache generations (by digest, no key object): young, then old
 * (promoted to young), then a miss. k: the series' index in the request (the outcome object of
 * prehashed series k + PREFETCH_OBJECTS is prefetched); known: its digest (prehashed), or NULL.
 * 0, or -1 with an exception set. */
static int lookup_label_cache(Scanner *r, Py_ssize_t k, Series *t, const Digest *known) {
    LabelCache *young = (LabelCache *)r->young, *old = (LabelCache *)r->old;
    const PreHash *pre = r->pre;
    Digest g;
    g = known ? *known : lc_digest((const uint8_t *)t->kp, t->kn);
    if (k + PREFETCH_OBJECTS < r->npre) /* (prehash prefetched the slots) */
        lc_prefetch_objects(young, pre[k + PREFETCH_OBJECTS].digest);
    const LCSlot *slot = lc_lookup(young, g);
    if (slot) {
        series_slot(t, slot);
        r->hits++;
        return 0;
    }
    if (!(slot = lc_lookup(old, g))) return label_cache_miss(r, g, t);
    series_slot(t, slot);
    r->hits++;
    if (lc_insert(young, g, (const char *)t->ep, t->elen, t->entry) < 0) return -1;
    r->promoted++;
    r->promoted_bytes += t->kn + t->elen;
    return 0;
}

/* The routing outcome from dict generations: young, then old (promoted), then miss(). 0, or
 * -1 with an exception set. */
static int lookup_dict(Scanner *r, Series *t) {
    if ((t->entry = PyDict_GetItemWithError(r->young, t->key))) {
        Py_INCREF(t->entry);
        r->hits++;
        return 0;
    }
    if (PyErr_Occurred()) return -1;
    if (!(t->entry = PyDict_GetItemWithError(r->old, t->key)))
        return PyErr_Occurred() ? -1 : call_miss(r, t);
    Py_INCREF(t->entry);
    r->hits++;
    if (!PyBytes_CheckExact(t->entry)) {
        PyErr_SetString(PyExc_TypeError, "cache entries must be bytes");
        return -1;
    }
    if (PyDict_SetItem(r->young, t->key, t->entry) < 0) return -1;
    r->promoted++;
    r->promoted_bytes += entry_bytes(t->key, t->entry);
    return 0;
}

/* Destination i takes only some exemplars/histograms: filt(i, raw) gives (rest, samples
 * kept); nothing kept is a drop ("filtered"). 0, or -1 with an exception set. */
static int send_filtered(Scanner *r, const Series *t, Py_ssize_t i, const char *labels,
                         Py_ssize_t nlabels, uint32_t hash, long long n) {
    PyObject *idx = NULL, *out = NULL, *frest;
    long long kept;
    int done = -1;
    if (!t->raw) { /* exemplars and histograms are counted only by split_series */
        PyErr_SetString(PyExc_SystemError, "scan_request: exemplars or histograms to filter "
                                           "in a series split_series did not split");
        goto done;
    }
    if (!(idx = PyLong_FromSsize_t(i))) goto done;
    if (!(out = PyObject_CallFunctionObjArgs(r->filt, idx, t->raw, NULL))) goto done;
    if (!PyTuple_CheckExact(out) || PyTuple_GET_SIZE(out) != 2 ||
        !PyBytes_CheckExact((frest = PyTuple_GET_ITEM(out, 0)))) {
        PyErr_SetString(PyExc_TypeError, "filt gives (rest, kept)");
        goto done;
    }
    kept = PyLong_AsLongLong(PyTuple_GET_ITEM(out, 1));
    if (kept == -1 && PyErr_Occurred()) goto done;
    if (!kept)
        done = add_drop(r->s, i, str_filtered, n);
    else
        done = write_frame(r->s, i, labels, nlabels, PyBytes_AS_STRING(frest),
                           PyBytes_GET_SIZE(frest), kept, hash);
done:
    Py_XDECREF(idx);
    Py_XDECREF(out);
    return done;
}

/* Destination i's item of the entry e[*ep:] when it keeps the series (kind 1: labels = the
 * key; kind 2: labels of its own), sent; *ep moves past it. 0, or -1 with an exception set. */
static int apply_kept(Scanner *r, const Series *t, Py_ssize_t i, const uint8_t *e,
                      Py_ssize_t elen, Py_ssize_t *ep, long long n) {
    const char *labels;
    Py_ssize_t nlabels, at = *ep;
    uint32_t hash;
    if (e[at] == 1 && at + 5 <= elen) {
        hash = get_u32(e + at + 1);
        labels = t->kp;
        nlabels = t->kn;
        *ep = at + 5;
    } else if (e[at] == 2 && at + 9 <= elen) {
        hash = get_u32(e + at + 1);
        nlabels = (Py_ssize_t)get_u32(e + at + 5);
        if (at + 9 + nlabels > elen) {
            PyErr_SetString(PyExc_ValueError, "truncated cache entry");
            return -1;
        }
        labels = (const char *)e + at + 9;
        *ep = at + 9 + nlabels;
    } else {
        PyErr_SetString(PyExc_ValueError, "bad cache entry");
        return -1;
    }
    if (r->s->filters[i] && (t->nex || t->nhist))
        return send_filtered(r, t, i, labels, nlabels, hash, n);
    if (labels == t->kp && t->frame) return write_field(r->s, i, t->frame, t->nframe, n, hash);
    return write_frame(r->s, i, labels, nlabels, t->rest, t->nrest, n, hash);
}

/* The series (n samples, exemplars and histograms) as its entry routes it, one item per
 * destination: 0 not sent, 3 dropped (reasons[index]), 1 or 2 kept (apply_kept). 0, or -1
 * with an exception set. */
static int apply_entry(Scanner *r, const Series *t, long long n) {
    State *s = r->s;
    const uint8_t *e = t->ep;
    Py_ssize_t elen = t->elen, ep = 0;
    for (Py_ssize_t i = 0; i < s->ndest; i++) {
        if (ep >= elen) {
            PyErr_SetString(PyExc_ValueError, "a cache entry is shorter than its destinations");
            return -1;
        }
        if (e[ep] == 0) { /* not sent, not counted */
            ep += 1;
            continue;
        }
        if (e[ep] != 3) {
            if (apply_kept(r, t, i, e, elen, &ep, n) < 0) return -1;
            continue;
        }
        if (ep + 2 > elen || e[ep + 1] >= PyTuple_GET_SIZE(r->reasons)) {
            PyErr_SetString(PyExc_ValueError, "bad drop reason in a cache entry");
            return -1;
        }
        if (add_drop(s, i, PyTuple_GET_ITEM(r->reasons, e[ep + 1]), n) < 0) return -1;
        ep += 2;
    }
    return 0;
}

/* A series whose fields are known (series_fields): its outcome looked up (k: its index in the
 * request; known: the digest of its labels, or NULL) and applied. SCAN_OK or SCAN_ERR (what t
 * holds is released by the caller). */
static int route_series(Scanner *r, Py_ssize_t k, Series *t, const Digest *known) {
    if ((r->label_caches ? lookup_label_cache(r, k, t, known) : lookup_dict(r, t)) < 0)
        return SCAN_ERR;
    if (!t->ep && series_entry(t) < 0) return SCAN_ERR; /* miss() or a dict generation answered */
    long long n = t->nsamples + t->nex + t->nhist;
    r->samples_in += n;
    return n && apply_entry(r, t, n) < 0 ? SCAN_ERR : SCAN_OK;
}

/* The per-series step: the series d[vstart:vend] split, looked up and sent. SCAN_OK,
 * SCAN_BAIL, SCAN_ERR. */
static int scan_series(Scanner *r, Py_ssize_t vstart, Py_ssize_t vend) {
    Py_ssize_t k = (Py_ssize_t)r->series_in++; /* the series' index in the request */
    Series t;
    series_init(&t);
    int step = series_fields(r, vstart, vend, &t);
    if (step == SCAN_OK) step = route_series(r, k, &t, NULL);
    series_clear(&t);
    return step;
}

/* The prehashed series k (found, hashed and its fields measured by prehash): as scan_series
 * routes it, with its digest known and, when its length is written in the fewest bytes, its
 * whole field as what a destination keeping the labels gets. SCAN_OK, SCAN_ERR. */
static int scan_prehashed(Scanner *r, Py_ssize_t k) {
    const PreHash *h = &r->pre[k];
    const uint8_t *d = r->d;
    Py_ssize_t labels_end = h->start + h->len;
    Series t;
    series_init(&t);
    int step = SCAN_OK;
    const Digest *known = &h->digest;
    r->series_in++;
    if (!h->nsamples && labels_end != h->vend) {
        step = series_split(r, h->start, h->vend, &t); /* another shape */
        known = NULL; /* its key is all its labels (a label may follow a sample), not the leading */
    } else {
        t.nsamples = h->nsamples;
        t.kp = (const char *)d + h->start;
        t.kn = h->len;
        t.rest = (const char *)d + labels_end;
        t.nrest = h->vend - labels_end;
        if (h->start - h->field == 1 + varint_size((uint64_t)(h->vend - h->start))) {
            t.frame = (const char *)d + h->field;
            t.nframe = h->vend - h->field;
        }
    }
    if (step == SCAN_OK) step = route_series(r, k, &t, known);
    series_clear(&t);
    return step;
}

/* The request's fields: series (1) and metadata (3) taken, others skipped. SCAN_OK,
 * SCAN_BAIL, SCAN_ERR. */
static int scan_fields(Scanner *r) {
    Py_ssize_t pos = 0, end = PyBytes_GET_SIZE(r->data);
    PbField f;
    int more;
    for (Py_ssize_t k = 0; k < r->npre; k++) { /* the leading series, found by prehash */
        int step = scan_prehashed(r, k);
        if (step != SCAN_OK) return step;
    }
    pos = r->pre_end; /* (0 when nothing was prehashed) */
    while ((more = pb_next(r->d, &pos, end, &f)) == 1) {
        if (f.field != 1 && f.field != 3) continue;
        if (f.wire != 2) return SCAN_BAIL;
        int step = f.field == 1 ? scan_series(r, f.vstart, f.vend)
                                : scan_metadata(r, r->data, f.vstart, f.vend);
        if (step != SCAN_OK) return step;
    }
    return more < 0 ? SCAN_BAIL : SCAN_OK;
}

/* A list of the per-destination buffers as bytes (new reference), or NULL. */
static PyObject *bufs_list(Buf *bufs, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b;
        if (bufs[i].obj) { /* cut to its length and handed over (the buffer is left empty) */
            b = _PyBytes_Resize(&bufs[i].obj, bufs[i].len) < 0 ? NULL : bufs[i].obj;
            bufs[i].obj = NULL;
            bufs[i].data = NULL;
            bufs[i].len = bufs[i].cap = 0;
        } else {
            b = PyBytes_FromStringAndSize(bufs[i].data, bufs[i].len);
        }
        if (!b) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, b);
    }
    return list;
}

/* A list of the per-destination counts (new reference), or NULL. */
static PyObject *counts_list(const long long *counts, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(counts[i]);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

/* {(destination, reason): samples} of the drops (new reference), or NULL. */
static PyObject *drops_dict(const State *s) {
    PyObject *dropped = PyDict_New(), *key = NULL, *total = NULL;
    if (!dropped) return NULL;
    for (Py_ssize_t k = 0; k < s->ndrops; k++) {
        long long n = s->drops[k].samples;
        if (!(key = Py_BuildValue("(nO)", s->drops[k].dest, s->drops[k].reason))) goto fail;
        PyObject *prev = PyDict_GetItemWithError(dropped, key); /* an equal reason again */
        if (!prev && PyErr_Occurred()) goto fail;
        if (prev) {
            long long before = PyLong_AsLongLong(prev);
            if (before == -1 && PyErr_Occurred()) goto fail;
            n += before;
        }
        if (!(total = PyLong_FromLongLong(n)) || PyDict_SetItem(dropped, key, total) < 0)
            goto fail;
        Py_CLEAR(key);
        Py_CLEAR(total);
    }
    return dropped;
fail:
    Py_XDECREF(key);
    Py_XDECREF(total);
    Py_DECREF(dropped);
    return NULL;
}

/* The result, in scan.Scan field order (new reference), or NULL. */
static PyObject *scan_result(const Scanner *r) {
    State *s = r->s; /* its share bodies are handed over (bufs_list) */
    PyObject *bodies = NULL, *indexes = NULL, *samples = NULL, *series = NULL, *dropped = NULL;
    if (!(bodies = bufs_list(s->bodies, s->ndest)) ||
        !(indexes = bufs_list(s->indexes, s->ndest)) ||
        !(samples = counts_list(s->samples, s->ndest)) ||
        !(series = counts_list(s->series, s->ndest)) || !(dropped = drops_dict(s)))
        goto fail;
    /* "N" steals the five references, also when Py_BuildValue fails */
    return Py_BuildValue("(NNNNNLLOLLLLL)", bodies, indexes, samples, series, dropped,
                         r->samples_in, r->series_in, r->metadata, r->hits, r->promoted,
                         r->promoted_bytes, r->misses, r->miss_bytes);
fail:
    Py_XDECREF(bodies);
    Py_XDECREF(indexes);
    Py_XDECREF(samples);
    Py_XDECREF(series);
    Py_XDECREF(dropped);
    return NULL;
}

static PyObject *scan_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Scanner r;
    memset(&r, 0, sizeof(r));
    int step = scan_arguments(&r, args, nargs);
    if (step != SCAN_OK) return step == SCAN_BAIL ? pure_scan(args, nargs) : NULL;
    PyObject *result = NULL;
    step = SCAN_ERR;
    if (scan_start(&r, PyBytes_GET_SIZE(r.data) + 64, 1) < 0) goto done;
    step = scan_fields(&r);
    if (step == SCAN_OK) result = scan_result(&r);
done:
    scan_free(&r);
    /* Malformed or unusual input: the reference implementation decides (and raises). */
    return step == SCAN_BAIL ? pure_scan(args, nargs) : result;
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
        PyObject *value = NULL;
        if (name && value_at < 0)
            value = PyUnicode_New(0, 0);
        else if (name)
            value = PyUnicode_DecodeUTF8((const char *)d + value_at, value_len, "strict");
        if (!value) { /* invalid UTF-8: the reference raises its error */
            Py_XDECREF(name);
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

/* The size of one Label field of a TimeSeries (tag, length, Label{name, value}), bytes. */
static inline Py_ssize_t label_field_size(Py_ssize_t nn, Py_ssize_t vn) {
    Py_ssize_t inner = 1 + varint_size((uint64_t)nn) + nn + 1 + varint_size((uint64_t)vn) + vn;
    return 1 + varint_size((uint64_t)inner) + inner;
}

/* Write one Label field (label_field_size bytes) at p; the end of what was written. */
static inline char *put_label_field(char *p, const char *np, Py_ssize_t nn, const char *vp,
                                    Py_ssize_t vn) {
    Py_ssize_t inner = 1 + varint_size((uint64_t)nn) + nn + 1 + varint_size((uint64_t)vn) + vn;
    *p++ = 0x0A;
    p = put_varint(p, (uint64_t)inner);
    *p++ = 0x0A;
    p = put_varint(p, (uint64_t)nn);
    memcpy(p, np, (size_t)nn);
    p += nn;
    *p++ = 0x12;
    p = put_varint(p, (uint64_t)vn);
    memcpy(p, vp, (size_t)vn);
    return p + vn;
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
        total += label_field_size(nlen[i], vlen[i]);
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) p = put_label_field(p, names[i], nlen[i], values[i], vlen[i]);
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

/* The metric name of the frame body[pos:end] (a framed TimeSeries) as named_frames_py finds
 * it: the value of the first Label whose name is __name__, its Label fields walked (a value
 * holding those bytes is never taken for the name): 1 and *np, *nn; 0 for none (""). */
static int frame_name(const char *body, Py_ssize_t pos, Py_ssize_t end, const char **np,
                      Py_ssize_t *nn) {
    static const char field[] = "\x0a\x08__name__\x12";
    const Py_ssize_t flen = (Py_ssize_t)sizeof(field) - 1;
    const uint8_t *d = (const uint8_t *)body;
    Py_ssize_t at = pos + 1;
    uint64_t size;
    if (pos >= end || d[pos] != 0x0a || !read_varint(d, &at, end, &size)) return 0;
    while (at < end && d[at] == 0x0a) {
        at++;
        if (!read_varint(d, &at, end, &size) || size > (uint64_t)(end - at)) return 0;
        Py_ssize_t label_end = at + (Py_ssize_t)size;
        if ((Py_ssize_t)size >= flen && !memcmp(body + at, field, (size_t)flen)) {
            Py_ssize_t value = at + flen;
            uint64_t vlen;
            if (!read_varint(d, &value, label_end, &vlen) || vlen > (uint64_t)(label_end - value))
                return 0;
            *np = body + value;
            *nn = (Py_ssize_t)vlen;
            return 1;
        }
        at = label_end;
    }
    return 0;
}

/* Whether an index of xlen bytes fits a body of blen bytes: 1; 0 when its frames run past the
 * body (the caller hands it to its reference); -1 with ValueError when it is not a whole
 * number of entries. */
static int index_fits(const uint8_t *x, Py_ssize_t xlen, Py_ssize_t blen) {
    if (xlen % 12) {
        PyErr_SetString(PyExc_ValueError, "index length is not a multiple of 12");
        return -1;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < xlen; i += 12) total += get_u32(x + i);
    return total <= blen;
}

/* Compiled rwrouter.wire.index.named_frames_py, as a list: per frame of (body, index), in
 * order, (its metric name as raw bytes, samples, shard hash). The same search (the first
 * framed __name__ Label in the frame) and the same varint read; an index that does not fit its
 * body (or other types) goes to the reference. Consecutive frames of one name share the
 * bytes object. */
static PyObject *named_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]))
        return call_reference("rwrouter.wire.index", "named_frames_list", args, nargs);
    const char *body = PyBytes_AS_STRING(args[0]);
    const uint8_t *x = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[1]);
    int fits = index_fits(x, n, PyBytes_GET_SIZE(args[0]));
    if (fits < 0) return NULL;
    if (!fits) return call_reference("rwrouter.wire.index", "named_frames_list", args, nargs);
    PyObject *out = PyList_New(n / 12), *last = PyBytes_FromStringAndSize(NULL, 0);
    if (!out || !last) goto fail;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i += 12) {
        Py_ssize_t end = pos + (Py_ssize_t)get_u32(x + i), nn = 0;
        const char *np = "";
        frame_name(body, pos, end, &np, &nn);
        if (PyBytes_GET_SIZE(last) != nn || memcmp(PyBytes_AS_STRING(last), np, (size_t)nn)) {
            Py_SETREF(last, PyBytes_FromStringAndSize(np, nn));
            if (!last) goto fail;
        }
        PyObject *item = Py_BuildValue("(OII)", last, get_u32(x + i + 4), get_u32(x + i + 8));
        if (!item) goto fail;
        PyList_SET_ITEM(out, i / 12, item);
        pos = end;
    }
    Py_DECREF(last);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(last);
    return NULL;
}

/* list[i] += n for a list of int (new int objects; an item that is not an int raises). 0, or
 * -1 with an exception set. */
static int list_add(PyObject *list, Py_ssize_t i, long long n) {
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    if (v == -1 && PyErr_Occurred()) return -1;
    PyObject *sum = PyLong_FromLongLong(v + n);
    return sum ? PyList_SetItem(list, i, sum) : -1; /* steals sum */
}

/* One frame counted (count_share_py's loop body) for the name id nid_obj: 0, or -1 with an
 * exception set. */
static int count_frame(PyObject *nid_obj, long long samples, uint32_t hashed, PyObject *newest,
                       PyObject *older, PyObject *counted, PyObject *active, PyObject *other,
                       long long *held, long long max_series, int *capped) {
    Py_ssize_t nid = PyLong_AsSsize_t(nid_obj);
    if (nid == -1 && PyErr_Occurred()) return -1;
    if (nid < 0 || nid >= PyList_GET_SIZE(counted) || nid >= PyList_GET_SIZE(active)) {
        PyErr_SetString(PyExc_IndexError, "a name id outside the counts");
        return -1;
    }
    if (list_add(counted, nid, samples) < 0) return -1;
    if (other != Py_None) {
        Py_ssize_t oid = PyLong_AsSsize_t(other);
        if (oid == -1 && PyErr_Occurred()) return -1;
        if (oid == nid) return 0;
    }
    PyObject *key = PyLong_FromUnsignedLongLong((unsigned long long)nid << 32 | hashed);
    if (!key) return -1;
    int rc = -1, known = PyDict_Contains(newest, key);
    if (known < 0) goto done;
    rc = 0;
    if (known) goto done;
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(older); g++) {
        PyObject *generation = PyList_GET_ITEM(older, g);
        PyObject *was = PyDict_GetItemWithError(generation, key);
        rc = -1;
        if (!was && PyErr_Occurred()) goto done;
        rc = 0;
        if (!was) continue;
        int none = was == Py_None; /* pop(key, None) gives None: removed, as if absent */
        if (PyDict_DelItem(generation, key) < 0 || (!none && PyDict_SetItem(newest, key, nid_obj) < 0)) {
            rc = -1;
            goto done;
        }
        if (none) continue;
        goto done;
    }
    if (*held >= max_series) {
        *capped = 1;
        goto done;
    }
    if (PyDict_SetItem(newest, key, nid_obj) < 0 || list_add(active, nid, 1) < 0) {
        rc = -1;
        goto done;
    }
    (*held)++;
done:
    Py_DECREF(key);
    return rc;
}

/* Compiled rwrouter.audit.count.count_share_py (same arguments, result and state changes):
 * the audit's count of one share's frames, walked in place. Other argument types, or an index
 * that does not fit its body, go to the reference. */
static PyObject *count_share(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 11 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        !PyDict_CheckExact(args[2]) || !PyDict_CheckExact(args[3]) ||
        !PyList_CheckExact(args[4]) || !PyList_CheckExact(args[5]) ||
        !PyList_CheckExact(args[6]))
        return call_reference("rwrouter.audit.count", "count_share_py", args, nargs);
    PyObject *ids = args[2], *newest = args[3], *older = args[4], *counted = args[5];
    PyObject *active = args[6], *add_name = args[10];
    for (Py_ssize_t g = 0; g < PyList_GET_SIZE(older); g++)
        if (!PyDict_CheckExact(PyList_GET_ITEM(older, g)))
            return call_reference("rwrouter.audit.count", "count_share_py", args, nargs);
    const char *body = PyBytes_AS_STRING(args[0]);
    const uint8_t *x = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t xlen = PyBytes_GET_SIZE(args[1]);
    int fits = index_fits(x, xlen, PyBytes_GET_SIZE(args[0]));
    if (fits < 0) return NULL;
    if (!fits) return call_reference("rwrouter.audit.count", "count_share_py", args, nargs);
    long long held = PyLong_AsLongLong(args[8]), max_series = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred()) return NULL;
    long long total = 0;
    int capped = 0;
    /* the last name, its id and OTHER's id (owned: add_name may change ids and OTHER) */
    PyObject *last = NULL, *last_id = NULL, *other = Py_NewRef(args[7]);
    Py_ssize_t pos = 0;
    for (Py_ssize_t at = 0; at < xlen / 12; at++) {
        const uint8_t *e = x + 12 * at;
        Py_ssize_t end = pos + (Py_ssize_t)get_u32(e), nn = 0;
        const char *np = "";
        frame_name(body, pos, end, &np, &nn);
        pos = end;
        if (!last || PyBytes_GET_SIZE(last) != nn ||
            memcmp(PyBytes_AS_STRING(last), np, (size_t)nn)) {
            Py_XSETREF(last, PyBytes_FromStringAndSize(np, nn));
            if (!last) goto fail;
            Py_XSETREF(last_id, Py_XNewRef(PyDict_GetItemWithError(ids, last)));
            if (!last_id && PyErr_Occurred()) goto fail;
        }
        if (!last_id) { /* not known: its id (and OTHER's) from add_name */
            PyObject *got = PyObject_CallOneArg(add_name, last);
            if (!got) goto fail;
            if (!PyTuple_CheckExact(got) || PyTuple_GET_SIZE(got) != 2) {
                Py_DECREF(got);
                PyErr_SetString(PyExc_TypeError, "add_name gives (id, the id of OTHER)");
                goto fail;
            }
            Py_XSETREF(other, Py_NewRef(PyTuple_GET_ITEM(got, 1)));
            last_id = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            Py_DECREF(got);
            Py_CLEAR(last); /* looked up again next frame: in ids now, or OTHER's again */
        }
        long long samples = get_u32(e + 4);
        total += samples;
        if (count_frame(last_id, samples, get_u32(e + 8), newest, older, counted, active, other,
                        &held, max_series, &capped) < 0)
            goto fail;
    }
    Py_XDECREF(last);
    Py_XDECREF(last_id);
    Py_DECREF(other);
    return Py_BuildValue("(LLO)", total, held, capped ? Py_True : Py_False);
fail:
    Py_XDECREF(last);
    Py_XDECREF(last_id);
    Py_DECREF(other);
    return NULL;
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
        if (!(bodies[s] = PyBytes_FromStringAndSize(NULL, sizes[s]))) goto fail;
        if (!(indexes[s] = PyBytes_FromStringAndSize(NULL, counts[s] * 12))) goto fail;
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

/* blank_bytes(n) -> (bytes, memoryview): a new bytes object of n bytes, not initialized, and
 * a writable view of them, for a decoder to write into (rwrouter.wire.codec.decompress: the
 * snappy decoder writes the decoded body in place, no zeroed buffer and no copy). The bytes
 * object has no other reference and no hash until the caller shares it; the view does not
 * keep it alive: the caller holds both and releases the view once written. */
static PyObject *blank_bytes(PyObject *module, PyObject *arg) {
    (void)module;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "blank_bytes: a negative size");
        return NULL;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, n);
    if (!data) return NULL;
    PyObject *view = PyMemoryView_FromMemory(PyBytes_AS_STRING(data), n, PyBUF_WRITE);
    if (!view) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(2, data, view);
    Py_DECREF(data);
    Py_DECREF(view);
    return out;
}

#include "_rw2in.h" /* rw2_to_rw1: remote write 2.0 in (rwrouter.wire.rw2_in) */
#include "_rw2scan.h" /* scan_rw2: remote write 2.0 routed without its RW1 form */
#include "_rw2out.h" /* encode_v2, strip_start_timestamps: remote write 2.0 out */
#include "_age.h" /* sample_ages: the sample age limit (rwrouter.wire.age) */
#include "_relabel.h" /* relabel_program: the relabel engine's rule loop */
#include "_route.h" /* route_labels: the routing miss path */

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define RWROUTER_CPUID 1
#endif

/* upper_state_dirty(): whether the upper halves of the vector registers are in use now (XINUSE
 * bits 2 and 6, AVX and ZMM_Hi256, read by XGETBV 1), or None where that cannot be read (not
 * x86, no XSAVE with XINUSE). A diagnostic for the tests: the accelerator's calls into
 * libraries leave them clear (see clear_upper_state). */
static PyObject *upper_state_dirty(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
#if defined(RWROUTER_CPUID)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        Py_RETURN_NONE; /* no OSXSAVE: no XGETBV */
    if (!__get_cpuid_count(0xD, 1, &a, &b, &c, &d) || !(a & (1u << 2)))
        Py_RETURN_NONE; /* XGETBV 1 (XINUSE) not supported */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return PyBool_FromLong((lo & ((1u << 2) | (1u << 6))) != 0);
#else
    Py_RETURN_NONE;
#endif
}

static PyMethodDef methods[] = {
    {"upper_state_dirty", upper_state_dirty, METH_NOARGS,
     "Whether the vector registers' upper halves are in use (None: cannot tell here)."},
#if defined(RWROUTER_ISAL)
    {"crc32", (PyCFunction)crc32_isal, METH_O,
     "zlib.crc32(data) of a bytes-like object (ISA-L's CRC-32: the same values)."},
#endif
    {"scan_request", (PyCFunction)(void (*)(void))scan_request, METH_FASTCALL,
     "Compiled rwrouter.routing.scan.scan_request_py (same arguments, same result)."},
    {"signature", (PyCFunction)(void (*)(void))signature, METH_FASTCALL,
     "Compiled rwrouter.routing.scan.signature_py."},
    {"named_frames", (PyCFunction)(void (*)(void))named_frames, METH_FASTCALL,
     "Compiled rwrouter.wire.index.named_frames_list (same result, same errors)."},
    {"count_share", (PyCFunction)(void (*)(void))count_share, METH_FASTCALL,
     "Compiled rwrouter.audit.count.count_share_py (same arguments and result)."},
    {"index_totals", (PyCFunction)index_totals, METH_O,
     "Compiled rwrouter.wire.index.index_totals_py."},
    {"split_shards", (PyCFunction)(void (*)(void))split_shards, METH_FASTCALL,
     "Compiled rwrouter.wire.index.split_shards_py."},
    {"decode_labels", (PyCFunction)decode_labels, METH_O,
     "Compiled rwrouter.wire.codec.decode_labels (same result, same errors)."},
    {"encode_labels", (PyCFunction)encode_labels, METH_O,
     "Compiled rwrouter.wire.codec.encode_labels (same result)."},
    {"scan_rw2", (PyCFunction)(void (*)(void))scan_rw2, METH_FASTCALL,
     "Compiled rwrouter.routing.scan.scan_rw2_py (same result), or None: the reference's."},
    {"rw2_to_rw1", (PyCFunction)(void (*)(void))rw2_to_rw1, METH_FASTCALL,
     "Compiled rwrouter.wire.rw2_in.to_rw1_py (same result, same errors)."},
    {"encode_v2", (PyCFunction)(void (*)(void))encode_v2, METH_FASTCALL,
     "Compiled rwrouter.wire.rw2_out.encode_request_py (same arguments, same result)."},
    {"strip_start_timestamps", (PyCFunction)strip_start_timestamps, METH_O,
     "Compiled rwrouter.wire.rw2_out.strip_start_timestamps_py."},
    {"sample_ages", (PyCFunction)sample_ages, METH_O,
     "Compiled rwrouter.wire.age.sample_ages_py."},
    {"relabel_program", (PyCFunction)(void (*)(void))relabel_program, METH_FASTCALL,
     "Compiled rwrouter.relabel.engine.process (rules compiled by engine.program)."},
    {"blank_bytes", (PyCFunction)blank_bytes, METH_O,
     "A new bytes object of n bytes, not initialized, and a writable view of them."},
    {"route_labels", (PyCFunction)(void (*)(void))route_labels, METH_FASTCALL,
     "Compiled rwrouter.routing.router.Router._route_raw (destinations without escaping)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_scan", "Compiled per-series loop of rwrouter's receive path.", -1,
    methods, NULL, NULL, NULL, NULL,
};

/* The module's own references (made by PyInit__scan). */
static void clear_globals(void) {
    Py_CLEAR(split_series_fn);
    Py_CLEAR(decode_labels_py_fn);
    Py_CLEAR(crc32_fn);
    Py_CLEAR(check_metadata_fn);
    Py_CLEAR(str_filtered);
    Py_CLEAR(str_labels);
    Py_CLEAR(str_rest);
    Py_CLEAR(str_samples);
    Py_CLEAR(str_exemplars);
    Py_CLEAR(str_histograms);
    Py_CLEAR(rl_empty);
    Py_CLEAR(rt_name);
    rt_clear_caches();
}

/* Per-process random seeds of the cache digest (os.urandom): 0, or -1 with an exception set. */
static int seed_digest(void) {
    PyObject *urandom = import_attr("os", "urandom");
    if (!urandom) return -1;
    PyObject *random_bytes = PyObject_CallFunction(urandom, "i", 16);
    Py_DECREF(urandom);
    if (!random_bytes) return -1;
    char seed[16];
    memcpy(seed, &lc_seed1, 8); /* the built-in seeds, unless os.urandom gives 16 bytes */
    memcpy(seed + 8, &lc_seed2, 8);
    if (PyBytes_Check(random_bytes) && PyBytes_GET_SIZE(random_bytes) == 16)
        memcpy(seed, PyBytes_AS_STRING(random_bytes), 16);
    lc_set_seed(seed);
    Py_DECREF(random_bytes);
    return 0;
}

/* The module, or NULL at the first failure (what was made is released). */
PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *module = NULL;
    if (!(split_series_fn = import_attr("rwrouter.wire.codec", "split_series")) ||
        !(decode_labels_py_fn = import_attr("rwrouter.wire.codec", "decode_labels")) ||
        !(crc32_fn = import_attr("zlib", "crc32")) ||
        !(check_metadata_fn = import_attr("rwrouter.wire.validate", "check_metadata")))
        goto fail;
    if (!(str_filtered = PyUnicode_InternFromString("filtered")) ||
        !(str_labels = PyUnicode_InternFromString("labels")) ||
        !(str_rest = PyUnicode_InternFromString("rest")) ||
        !(str_samples = PyUnicode_InternFromString("samples")) ||
        !(str_exemplars = PyUnicode_InternFromString("exemplars")) ||
        !(str_histograms = PyUnicode_InternFromString("histograms")) ||
        !(rl_empty = PyUnicode_FromStringAndSize("", 0)) ||
        !(rt_name = PyUnicode_InternFromString("__name__")))
        goto fail;
#if defined(RWROUTER_X86_AVX_STATE)
    __builtin_cpu_init();
    cpu_has_avx = __builtin_cpu_supports("avx");
#endif
    if (PyType_Ready(&LabelCacheType) < 0 || seed_digest() < 0) goto fail;
    if (!(module = PyModule_Create(&moduledef))) goto fail;
    if (PyModule_AddObjectRef(module, "LabelCache", (PyObject *)&LabelCacheType) < 0) goto fail;
    return module;
fail:
    Py_XDECREF(module);
    clear_globals();
    return NULL;
}
