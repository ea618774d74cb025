/*
 * Remote write 2.0 in, compiled: rwrouter.wire.rw2_in.to_rw1_py (the reference: same
 * arguments, same result) as rw2_to_rw1(data, max_bytes) -> (rw1 bytes, samples, histograms,
 * exemplars, start_timestamps); max_bytes an int, or None for no limit. Included at the end of
 * _scan.c: it uses its Buf, varint and import_attr helpers and _labelcache.h's lc_digest.
 *
 * The symbols table is decoded once per request (an array of offsets and lengths, 8 bytes a
 * symbol, allocated once its size is counted: at most 4 bytes a request byte, a field being
 * at least 2); each series is then written in the RW1 form straight from the request's bytes.
 * A request of 4 GiB or more (offsets over 32 bits) goes to the reference. Anything
 * malformed (or a shape this file does not take, e.g. a varint over 64 bits) hands the whole
 * request to the reference, which raises the reference DecodeError: both paths give the same
 * results and the same errors. What this file accepts it checks as the reference does (the
 * framing of every field, the wire types of the known ones, Sample and Histogram down to
 * bucket spans and packed fields, refs inside the symbols table).
 *
 * Wire format: protobuf encoding spec; messages: RW 2.0 (2.0-rc.4, Prometheus
 * prompb/io/prometheus/write/v2/types.proto) in, RW 1.0 (prompb) out.
 */

typedef struct {
    uint32_t start, len; /* the request is under 4 GiB */
} R2Span;

typedef struct {
    R2Span *items;
    Py_ssize_t n, cap;
} R2Spans;

typedef struct {
    uint32_t *items;
    Py_ssize_t n, cap;
} R2Refs;

typedef struct {
    Py_ssize_t off, len; /* a MetricMetadata payload in R2.meta */
    uint64_t hash;
} R2Entry;

typedef struct {
    uint32_t name, value; /* refs (both UINT32_MAX: an empty entry; no table has 2^32 refs) */
    uint32_t off, len;    /* the Label field in R2.labels */
    Digest hash;          /* its lc_hash128 (folded into series digests: scan_rw2) */
} R2Pair;

typedef struct {
    const uint8_t *d;
    R2Pair *pairs;   /* scan_rw2's Label fields by (name, value) refs, direct-mapped */
    int fold;        /* scan_rw2: series digests folded from the pairs' (lc_fold) */
    Buf labels;      /* ... and their bytes */
    R2Spans sym, series, samples, hists, exemplars;
    R2Refs refs, xrefs;
    Buf out, scratch, meta;
    R2Entry *entries; /* distinct metadata payloads, in order of first appearance */
    Py_ssize_t nentries, capentries;
    Py_ssize_t *table; /* entry index + 1 (0: empty), open addressing */
    Py_ssize_t mask;
    Py_ssize_t limit;       /* max_bytes: over it, the reference raises TooLargeError */
    Py_ssize_t meta_framed; /* bytes the distinct metadata entries take in the result */
} R2;

/* Whether the result would be over the limit with `more` bytes on top of the series written
 * and the metadata entries kept (a part of the result: over it means the whole is). */
static inline int r2_over(const R2 *c, Py_ssize_t more) {
    return more > c->limit - c->out.len - c->meta_framed;
}


#define R2_BAIL 0 /* hand the request to the reference */
#define R2_OK 1
#define R2_ERR (-1) /* an exception is set */
#define W(x) (1u << (x))

static inline int r2_span(R2Spans *a, Py_ssize_t start, Py_ssize_t len) {
    if (a->n == a->cap && pb_reserve((void **)&a->items, &a->cap, a->n + 1, sizeof(R2Span)) < 0)
        return -1;
    a->items[a->n++] = (R2Span){(uint32_t)start, (uint32_t)len};
    return 0;
}


static inline int r2_nonzero(const uint8_t *d, Py_ssize_t start, Py_ssize_t end) {
    for (; start < end; start++)
        if (d[start] & 0x7F) return 1;
    return 0;
}

/* validate.check_message: framing, and wire types allowed[field] (bits) of the fields below
 * nallowed (0: any). 1 ok, 0 not. With `start`, a non-zero varint at field `start_field`
 * sets *start. */
static int r2_check(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, const uint8_t *allowed,
                    Py_ssize_t nallowed, uint64_t start_field, int *start) {
    PbField f;
    int r;
    while ((r = pb_next(d, &pos, end, &f)) == 1) {
        if (f.field < (uint64_t)nallowed && allowed[f.field] && !(allowed[f.field] & W(f.wire)))
            return 0;
        if (start && f.field == start_field && f.wire == 0 && r2_nonzero(d, f.vstart, f.vend))
            *start = 1;
    }
    return r == 0;
}

static const uint8_t r2_sample_wires[4] = {0, W(1), W(0), W(0)};
static const uint8_t r2_span_wires[3] = {0, W(0), W(0)};
static const uint8_t r2_hist_wires[18] = {
    0, W(0), W(1), W(1), W(0), W(1), W(0), W(1), W(2), W(2) | W(0), W(2) | W(1), W(2),
    W(2) | W(0), W(2) | W(1), W(0), W(0), W(2) | W(1), W(0),
};

/* validate.check_histogram (and field 17, the start timestamp): 1 ok, 0 not. */
static int r2_histogram(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int *start) {
    PbField f;
    int r;
    while ((r = pb_next(d, &pos, end, &f)) == 1) {
        if (f.field <= 17 && !(r2_hist_wires[f.field] & W(f.wire))) return 0;
        if (f.field == 17 && r2_nonzero(d, f.vstart, f.vend)) *start = 1;
        if (f.wire != 2) continue;
        if (f.field == 8 || f.field == 11) {
            if (!r2_check(d, f.vstart, f.vend, r2_span_wires, 3, 0, NULL)) return 0;
        } else if (f.field == 9 || f.field == 12) {
            Py_ssize_t p = f.vstart;
            while (p < f.vend)
                if (!skip_varint(d, &p, f.vend)) return 0;
        } else if ((f.field == 10 || f.field == 13 || f.field == 16) &&
                   (f.vend - f.vstart) % 8) {
            return 0;
        }
    }
    return r == 0;
}

/* Append the refs of one labels_refs field (packed, or one varint) to *refs: R2_OK, R2_BAIL
 * (malformed, or a ref outside the table), R2_ERR. */
static int r2_refs(R2 *c, const PbField *f, R2Refs *refs) {
    const uint8_t *d = c->d;
    Py_ssize_t p = f->vstart;
    if (f->wire != 0 && f->wire != 2) return R2_BAIL;
    while (p < f->vend) {
        uint64_t ref;
        if (!read_varint(d, &p, f->vend, &ref) || ref >= (uint64_t)c->sym.n) return R2_BAIL;
        if (pb_reserve((void **)&refs->items, &refs->cap, refs->n + 1, sizeof(uint32_t)) < 0)
            return R2_ERR;
        refs->items[refs->n++] = (uint32_t)ref;
        if (f->wire == 0) break;
    }
    return R2_OK;
}

static inline Py_ssize_t r2_label_inner(const R2Span *name, const R2Span *value) {
    Py_ssize_t n = name->len, v = value->len; /* 64-bit sums: one symbol may be both */
    return 1 + varint_size((uint64_t)n) + n + 1 + varint_size((uint64_t)v) + v;
}

/* Bytes of the Label fields of refs (pairs; checked). */
static Py_ssize_t r2_labels_size(const R2 *c, const R2Refs *refs) {
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k + 1 < refs->n; k += 2) {
        Py_ssize_t inner = r2_label_inner(&c->sym.items[refs->items[k]],
                                          &c->sym.items[refs->items[k + 1]]);
        total += 1 + varint_size((uint64_t)inner) + inner;
    }
    return total;
}

/* Write the Label fields of refs at p (room reserved); *metric gets the value of the first
 * __name__ with a non-empty value (len 0: none), as rw2_in._labels. */
static char *r2_put_labels(const R2 *c, const R2Refs *refs, char *p, const R2Span **metric) {
    for (Py_ssize_t k = 0; k + 1 < refs->n; k += 2) {
        const R2Span *name = &c->sym.items[refs->items[k]];
        const R2Span *value = &c->sym.items[refs->items[k + 1]];
        Py_ssize_t inner = r2_label_inner(name, value);
        *p++ = 0x0A;
        p = put_varint(p, (uint64_t)inner);
        *p++ = 0x0A;
        p = put_varint(p, (uint64_t)name->len);
        memcpy(p, c->d + name->start, (size_t)name->len);
        p += name->len;
        *p++ = 0x12;
        p = put_varint(p, (uint64_t)value->len);
        memcpy(p, c->d + value->start, (size_t)value->len);
        p += value->len;
        if (metric && !(*metric)->len && name->len == 8 &&
            !memcmp(c->d + name->start, "__name__", 8))
            *metric = value;
    }
    return p;
}

/* An RW1 Exemplar field (labels from refs, then value and timestamp as they come) appended
 * to c->scratch: R2_OK, R2_BAIL, R2_ERR. */
static int r2_exemplar(R2 *c, Py_ssize_t pos, Py_ssize_t end) {
    const uint8_t *d = c->d;
    PbField f;
    int r;
    Py_ssize_t rest = 0, at = pos;
    c->xrefs.n = 0;
    while ((r = pb_next(d, &at, end, &f)) == 1) {
        if (f.field == 1) {
            int k = r2_refs(c, &f, &c->xrefs);
            if (k != R2_OK) return k;
        } else if (f.field == 2 || f.field == 3) {
            if (f.wire != (f.field == 2 ? 1u : 0u)) return R2_BAIL;
            rest += 1 + (f.vend - f.vstart);
        }
    }
    if (r < 0 || c->xrefs.n % 2) return R2_BAIL;
    Py_ssize_t inner = r2_labels_size(c, &c->xrefs) + rest;
    if (r2_over(c, c->scratch.len + 1 + varint_size((uint64_t)inner) + inner)) return R2_BAIL;
    if (buf_grow(&c->scratch, 1 + varint_size((uint64_t)inner) + inner) < 0) return R2_ERR;
    char *p = c->scratch.data + c->scratch.len;
    *p++ = 0x1A;
    p = put_varint(p, (uint64_t)inner);
    p = r2_put_labels(c, &c->xrefs, p, NULL);
    at = pos;
    while (pb_next(d, &at, end, &f) == 1) {
        if (f.field != 2 && f.field != 3) continue;
        *p++ = f.field == 2 ? 0x11 : 0x18;
        memcpy(p, d + f.vstart, (size_t)(f.vend - f.vstart));
        p += f.vend - f.vstart;
    }
    c->scratch.len = p - c->scratch.data;
    return R2_OK;
}

/* Merge one Metadata field into meta[type, help_ref, unit_ref]: 1 ok, 0 bail. */
static int r2_metadata(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, uint64_t *meta) {
    PbField f;
    int r;
    while ((r = pb_next(d, &pos, end, &f)) == 1) {
        if (f.field != 1 && f.field != 3 && f.field != 4) continue;
        Py_ssize_t p = f.vstart;
        if (f.wire != 0 || !read_varint(d, &p, f.vend, &meta[f.field > 1 ? f.field - 2 : 0]))
            return 0;
    }
    return r == 0;
}

/* The families' suffixes by metric type (rw2_in._SUFFIXES). */
static Py_ssize_t r2_family_len(const uint8_t *name, Py_ssize_t n, uint64_t type) {
    static const char *const hist[] = {"_bucket", "_sum", "_count", NULL};
    static const char *const gauge[] = {"_bucket", "_gsum", "_gcount", NULL};
    static const char *const summary[] = {"_sum", "_count", NULL};
    const char *const *suffixes = type == 3 ? hist : type == 4 ? gauge : type == 5 ? summary : NULL;
    for (; suffixes && *suffixes; suffixes++) {
        Py_ssize_t k = (Py_ssize_t)strlen(*suffixes);
        if (n > k && !memcmp(name + n - k, *suffixes, (size_t)k)) return n - k;
    }
    return n;
}

static inline Py_ssize_t r2_string_size(Py_ssize_t n) { return 1 + varint_size((uint64_t)n) + n; }

static char *r2_put_string(char *p, char tag, const uint8_t *s, Py_ssize_t n) {
    *p++ = tag;
    p = put_varint(p, (uint64_t)n);
    memcpy(p, s, (size_t)n);
    return p + n;
}

/* Add a series' metadata entry (rw2_in._metadata_entry) to the distinct ones: R2_OK, R2_BAIL
 * (a ref outside the table), R2_ERR. */
static int r2_add_metadata(R2 *c, uint64_t *meta, const R2Span *metric) {
    uint64_t type = meta[0];
    if ((meta[1] && meta[1] >= (uint64_t)c->sym.n) || (meta[2] && meta[2] >= (uint64_t)c->sym.n))
        return R2_BAIL;
    /* ref 0 is symbols[0], the empty string (also in an empty table) */
    const R2Span *help = meta[1] ? &c->sym.items[meta[1]] : NULL;
    const R2Span *unit = meta[2] ? &c->sym.items[meta[2]] : NULL;
    Py_ssize_t help_len = help ? help->len : 0, unit_len = unit ? unit->len : 0;
    if (type > 7) type = 0;
    if (!(type || help_len || unit_len) || !metric->len) return R2_OK;
    const uint8_t *name = c->d + metric->start;
    Py_ssize_t family = r2_family_len(name, metric->len, type);
    Py_ssize_t size = (type ? 1 + varint_size(type) : 0) + r2_string_size(family) +
                      (help_len ? r2_string_size(help_len) : 0) +
                      (unit_len ? r2_string_size(unit_len) : 0);
    if (buf_grow(&c->meta, size) < 0) return R2_ERR;
    Py_ssize_t off = c->meta.len;
    char *p = c->meta.data + off;
    if (type) {
        *p++ = 0x08;
        p = put_varint(p, type);
    }
    p = r2_put_string(p, 0x12, name, family);
    if (help_len) p = r2_put_string(p, 0x22, c->d + help->start, help_len);
    if (unit_len) p = r2_put_string(p, 0x2A, c->d + unit->start, unit_len);
    uint64_t hash = lc_digest((const uint8_t *)c->meta.data + off, size).h1;
    Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)c->mask);
    for (; c->table[slot]; slot = (slot + 1) & c->mask) {
        R2Entry *e = &c->entries[c->table[slot] - 1];
        if (e->hash == hash && e->len == size &&
            !memcmp(c->meta.data + e->off, c->meta.data + off, (size_t)size))
            return R2_OK; /* seen: the tentative copy is overwritten by the next one */
    }
    if (r2_over(c, r2_string_size(size))) return R2_BAIL; /* a new entry over the limit */
    if (pb_reserve((void **)&c->entries, &c->capentries, c->nentries + 1, sizeof(R2Entry)) < 0)
        return R2_ERR;
    c->entries[c->nentries] = (R2Entry){off, size, hash};
    c->table[slot] = ++c->nentries;
    c->meta.len += size;
    c->meta_framed += r2_string_size(size);
    if (2 * c->nentries > c->mask) { /* keep the table at most half full */
        Py_ssize_t cap = 2 * (c->mask + 1);
        Py_ssize_t *table = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
        if (!table) {
            PyErr_NoMemory();
            return R2_ERR;
        }
        for (Py_ssize_t i = 0; i < c->nentries; i++) {
            Py_ssize_t s = (Py_ssize_t)(c->entries[i].hash & (uint64_t)(cap - 1));
            while (table[s]) s = (s + 1) & (cap - 1);
            table[s] = i + 1;
        }
        PyMem_Free(c->table);
        c->table = table;
        c->mask = cap - 1;
    }
    return R2_OK;
}

/* Walk one TimeSeries: its refs, the spans of its samples, histograms and exemplars, its
 * metadata; checks samples and histograms. R2_OK, R2_BAIL, R2_ERR. */
static int r2_walk_series(R2 *c, Py_ssize_t pos, Py_ssize_t end, uint64_t *meta, int *start) {
    const uint8_t *d = c->d;
    PbField f;
    int r;
    c->refs.n = c->samples.n = c->hists.n = c->exemplars.n = 0;
    while ((r = pb_next(d, &pos, end, &f)) == 1) {
        if (f.field == 1) {
            int k = r2_refs(c, &f, &c->refs);
            if (k != R2_OK) return k;
            continue;
        }
        if (f.field > 5) continue; /* unknown: dropped */
        if (f.wire != 2) return R2_BAIL;
        R2Spans *into = NULL;
        if (f.field == 2) {
            if (!r2_check(d, f.vstart, f.vend, r2_sample_wires, 4, 3, start)) return R2_BAIL;
            into = &c->samples;
        } else if (f.field == 3) {
            if (!r2_histogram(d, f.vstart, f.vend, start)) return R2_BAIL;
            into = &c->hists;
        } else if (f.field == 4) {
            into = &c->exemplars;
        } else if (!r2_metadata(d, f.vstart, f.vend, meta)) {
            return R2_BAIL;
        }
        if (into && r2_span(into, f.vstart, f.vend - f.vstart) < 0) return R2_ERR;
    }
    return r < 0 || c->refs.n % 2 ? R2_BAIL : R2_OK;
}

/* Copy spans as LEN fields of `tag` to c->scratch: 0 ok, -1 MemoryError. */
static int r2_copy(R2 *c, const R2Spans *spans, char tag) {
    for (Py_ssize_t i = 0; i < spans->n; i++) {
        Py_ssize_t n = spans->items[i].len;
        if (buf_grow(&c->scratch, r2_string_size(n)) < 0) return -1;
        char *p = r2_put_string(c->scratch.data + c->scratch.len, tag,
                                c->d + spans->items[i].start, n);
        c->scratch.len = p - c->scratch.data;
    }
    return 0;
}

/* One series in the RW1 form appended to c->out; counts added to counts[3] (samples,
 * histograms, exemplars). R2_OK, R2_BAIL, R2_ERR. */
static int r2_series(R2 *c, Py_ssize_t pos, Py_ssize_t end, long long *counts, int *start) {
    uint64_t meta[3] = {0, 0, 0};
    int r = r2_walk_series(c, pos, end, meta, start);
    if (r != R2_OK) return r;
    c->scratch.len = 0;
    Py_ssize_t labels = r2_labels_size(c, &c->refs);
    if (r2_over(c, labels)) return R2_BAIL;
    if (buf_grow(&c->scratch, labels) < 0) return R2_ERR;
    R2Span none = {0, 0};
    const R2Span *metric = &none;
    char *p = r2_put_labels(c, &c->refs, c->scratch.data, &metric);
    c->scratch.len = p - c->scratch.data;
    if (r2_copy(c, &c->samples, 0x12) < 0) return R2_ERR;
    for (Py_ssize_t i = 0; i < c->exemplars.n; i++) {
        Py_ssize_t at = c->exemplars.items[i].start;
        if ((r = r2_exemplar(c, at, at + c->exemplars.items[i].len)) != R2_OK) return r;
    }
    if (r2_copy(c, &c->hists, 0x22) < 0) return R2_ERR;
    Py_ssize_t n = c->scratch.len;
    if (r2_over(c, r2_string_size(n))) return R2_BAIL;
    if (buf_grow(&c->out, r2_string_size(n)) < 0) return R2_ERR;
    p = r2_put_string(c->out.data + c->out.len, 0x0A, (const uint8_t *)c->scratch.data, n);
    c->out.len = p - c->out.data;
    if ((r = r2_add_metadata(c, meta, metric)) != R2_OK) return r;
    counts[0] += c->samples.n;
    counts[1] += c->hists.n;
    counts[2] += c->exemplars.n;
    return R2_OK;
}

/* Room for one more span in a, doubling it up to `most` spans (a->n < most): 0 ok, -1
 * MemoryError. */
static int r2_more(R2Spans *a, Py_ssize_t most) {
    Py_ssize_t cap = a->cap ? 2 * a->cap : 256;
    if (cap > most) cap = most;
    R2Span *items = PyMem_Realloc(a->items, (size_t)cap * sizeof(R2Span));
    if (!items) {
        PyErr_NoMemory();
        return -1;
    }
    a->items = items;
    a->cap = cap;
    return 0;
}

/* The request's symbols and series spans (symbols[0] empty), in one walk over its fields:
 * R2_OK, R2_BAIL (malformed), R2_ERR. A field takes at least two bytes, so neither table
 * grows past one span per two request bytes (4 bytes a request byte, what an exact count
 * would take at worst). */
static int r2_request(R2 *c, Py_ssize_t end) {
    const uint8_t *d = c->d;
    Py_ssize_t pos = 0, vstart, len, most = end / 2 + 1;
    PbField f;
    while (pos < end) {
        uint8_t tag = d[pos];
        if ((tag == 0x22 || tag == 0x2A) && pos + 1 < end && d[pos + 1] < 0x80) {
            vstart = pos + 2;
            len = d[pos + 1];
            if (len > end - vstart) return R2_BAIL;
            pos = vstart + len;
        } else {
            int r = pb_next(d, &pos, end, &f);
            if (r < 0) return R2_BAIL;
            if (f.field != 4 && f.field != 5) continue;
            if (f.wire != 2) return R2_BAIL;
            tag = f.field == 4 ? 0x22 : 0x2A;
            vstart = f.vstart;
            len = f.vend - f.vstart;
        }
        R2Spans *into = tag == 0x22 ? &c->sym : &c->series;
        if (into->n == into->cap && r2_more(into, most) < 0) return R2_ERR;
        into->items[into->n++] = (R2Span){(uint32_t)vstart, (uint32_t)len};
    }
    if (c->sym.n && c->sym.items[0].len) return R2_BAIL;
    return R2_OK;
}

static void r2_free(R2 *c) {
    PyMem_Free(c->pairs);
    PyMem_Free(c->labels.data);
    PyMem_Free(c->sym.items);
    PyMem_Free(c->series.items);
    PyMem_Free(c->samples.items);
    PyMem_Free(c->hists.items);
    PyMem_Free(c->exemplars.items);
    PyMem_Free(c->refs.items);
    PyMem_Free(c->xrefs.items);
    PyMem_Free(c->out.data);
    PyMem_Free(c->scratch.data);
    PyMem_Free(c->meta.data);
    PyMem_Free(c->entries);
    PyMem_Free(c->table);
}

/* The RW1 form: the series, then the distinct metadata entries. */
static PyObject *r2_result(R2 *c, long long *counts, int start) {
    Py_ssize_t total = c->out.len;
    for (Py_ssize_t i = 0; i < c->nentries; i++) total += r2_string_size(c->entries[i].len);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, total);
    if (!bytes) return NULL;
    char *p = PyBytes_AS_STRING(bytes);
    if (c->out.len) memcpy(p, c->out.data, (size_t)c->out.len);
    p += c->out.len;
    for (Py_ssize_t i = 0; i < c->nentries; i++)
        p = r2_put_string(p, 0x1A, (const uint8_t *)c->meta.data + c->entries[i].off,
                          c->entries[i].len);
    return Py_BuildValue("(NLLLO)", bytes, counts[0], counts[1], counts[2],
                         start ? Py_True : Py_False);
}

/* to_rw1_py(data, max_bytes=max_bytes): the reference's result or error. */
static PyObject *r2_reference(PyObject *data, PyObject *max_bytes) {
    PyObject *fn = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    if (!(fn = import_attr("rwrouter.wire.rw2_in", "to_rw1_py")) ||
        !(args = PyTuple_Pack(1, data)) ||
        !(kwargs = Py_BuildValue("{sO}", "max_bytes", max_bytes)))
        goto done;
    res = PyObject_Call(fn, args, kwargs);
done:
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return res;
}

static PyObject *rw2_to_rw1(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "rw2_to_rw1 takes (data, max_bytes)");
        return NULL;
    }
    PyObject *data = args[0], *max_bytes = nargs == 2 ? args[1] : Py_None;
    R2 c;
    memset(&c, 0, sizeof(c));
    c.limit = PY_SSIZE_T_MAX;
    if (max_bytes != Py_None) {
        c.limit = PyLong_CheckExact(max_bytes) ? PyLong_AsSsize_t(max_bytes) : -1;
        if (c.limit < 0) { /* another type, too large, negative: the reference */
            PyErr_Clear();
            return r2_reference(data, max_bytes);
        }
    }
    /* e.g. a bytearray or a memoryview, or 4 GiB and more (32-bit spans): the reference */
    if (!PyBytes_CheckExact(data) || (uint64_t)PyBytes_GET_SIZE(data) > UINT32_MAX)
        return r2_reference(data, max_bytes);
    c.d = (const uint8_t *)PyBytes_AS_STRING(data);
    long long counts[3] = {0, 0, 0};
    int start = 0, r = R2_ERR;
    PyObject *result = NULL;
    c.mask = 63;
    c.table = PyMem_Calloc((size_t)(c.mask + 1), sizeof(Py_ssize_t));
    if (!c.table) {
        PyErr_NoMemory();
        goto done;
    }
    r = r2_request(&c, PyBytes_GET_SIZE(data));
    for (Py_ssize_t i = 0; r == R2_OK && i < c.series.n; i++) {
        Py_ssize_t begin = c.series.items[i].start;
        r = r2_series(&c, begin, begin + c.series.items[i].len, counts, &start);
    }
    if (r == R2_OK) result = r2_result(&c, counts, start);
done:
    r2_free(&c); /* before the reference: it holds a table of its own */
    if (r == R2_BAIL) result = r2_reference(data, max_bytes);
    return result;
}

#undef W
