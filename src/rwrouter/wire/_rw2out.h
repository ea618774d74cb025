/*
 * Remote write 2.0 out: the compiled loops of rwrouter.wire.rw2_out (part of the accelerator;
 * included by _scan.c after its helpers: Buf, buf_grow, varint_size, put_varint,
 * read_varint, skip_varint, call_reference, lc_digest).
 *
 *   encode_v2(body, memo, resolve) -> (request, samples, histograms, exemplars)
 *       compiled rwrouter.wire.rw2_out.encode_request_py
 *   strip_start_timestamps(body) -> (body, removed)
 *       compiled rwrouter.wire.rw2_out.strip_start_timestamps_py
 *
 * The Python functions are the reference (see their docstrings for the rules): same output,
 * same errors. Whatever this code does not take (malformed framing, a wire type it does not
 * expect, other argument types, a metadata value of another shape) goes to the reference,
 * which gives the result or raises. Wire format: protobuf encoding spec; messages: RW 1.0
 * (prompb) in, RW 2.0 (io.prometheus.write.v2) out.
 */

#define RW_SAMPLE 0   /* piece: a whole Sample field of the body (tag 0x12 kept) */
#define RW_HIST 1     /* piece: a Histogram payload of the body (sent under tag 0x1a) */
#define RW_EXEMPLAR 2 /* piece: a converted Exemplar payload in the exemplar buffer */


/* The field at *pos (before end): its number, wire type, start (tag) and value range (a LEN
 * value without its length); *pos moves past it. 1, or 0 for what the reference decides. */
static int rw_field(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, uint64_t *number,
                    int *wire_type, Py_ssize_t *vstart, Py_ssize_t *vend) {
    PbField f;
    if (pb_next(d, pos, end, &f) != 1) return 0;
    *number = f.field;
    *wire_type = (int)f.wire;
    *vstart = f.vstart;
    *vend = f.vend;
    return 1;
}

/* -- symbols table ----------------------------------------------------------------------- */

/* A 64-bit hash of a short byte string, seeded per process (lc_seed1): 8 bytes a round,
 * multiply-rotate mixing, MurmurHash3's finaliser. For the per-request tables only (the
 * strings are compared in full on a hash match). */
static inline uint64_t rw_hash(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = lc_seed1 ^ ((uint64_t)n * 0x9E3779B97F4A7C15ULL);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h ^= lc_load64(p + i) * 0x87C37B91114253D5ULL;
        h = lc_rotl(h, 31) * 0x4CF5AD432745937FULL;
    }
    uint64_t k = 0;
    for (Py_ssize_t j = 0; i + j < n; j++) k |= (uint64_t)p[i + j] << (8 * j);
    h ^= k * 0x87C37B91114253D5ULL;
    return lc_fmix64(h);
}

typedef struct {
    const char *p; /* into the body, or a metadata bytes object kept alive by the caller */
    Py_ssize_t n;
    uint64_t h;
} RwSym;

typedef struct {
    RwSym *syms;
    Py_ssize_t nsyms, capsyms;
    uint32_t *slots; /* symbol index + 1; 0: empty */
    Py_ssize_t mask;
} RwSymbols;

static int sym_rehash(RwSymbols *t, Py_ssize_t capacity) {
    uint32_t *slots = PyMem_Calloc((size_t)capacity, sizeof(uint32_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t mask = capacity - 1;
    for (Py_ssize_t k = 1; k < t->nsyms; k++) {
        Py_ssize_t i = (Py_ssize_t)(t->syms[k].h & (uint64_t)mask);
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = (uint32_t)(k + 1);
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

static int sym_init(RwSymbols *t) {
    if (pb_reserve((void **)&t->syms, &t->capsyms, 1, sizeof(RwSym)) < 0) return -1;
    t->syms[0].p = "";
    t->syms[0].n = 0;
    t->syms[0].h = 0;
    t->nsyms = 1;
    return sym_rehash(t, 256);
}

/* The ref of a string (added when new): >= 0, or -1 with an error set. "" is ref 0. */
static int64_t sym_ref(RwSymbols *t, const char *p, Py_ssize_t n) {
    if (n == 0) return 0;
    uint64_t h = rw_hash((const uint8_t *)p, n);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)t->mask);
    while (t->slots[i]) {
        RwSym *s = &t->syms[t->slots[i] - 1];
        if (s->h == h && s->n == n && memcmp(s->p, p, (size_t)n) == 0) return t->slots[i] - 1;
        i = (i + 1) & t->mask;
    }
    if (t->nsyms >= (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "too many symbols in one request");
        return -1;
    }
    if (pb_reserve((void **)&t->syms, &t->capsyms, t->nsyms + 1, sizeof(RwSym)) < 0) return -1;
    int64_t ref = t->nsyms;
    t->syms[ref].p = p;
    t->syms[ref].n = n;
    t->syms[ref].h = h;
    t->nsyms++;
    t->slots[i] = (uint32_t)(ref + 1);
    if (2 * t->nsyms > t->mask + 1 && sym_rehash(t, 2 * (t->mask + 1)) < 0) return -1;
    return ref;
}

/* -- the encoder's state ----------------------------------------------------------------- */

/* The refs of a Label payload seen before in this request (its exact bytes): a second hash
 * table, so a label repeated across series (job, cluster, ...) costs one lookup. */
typedef struct {
    const char *p; /* the payload's first occurrence, in the body */
    Py_ssize_t n;
    uint64_t h;
    uint32_t a, b;     /* name ref, value ref */
    Py_ssize_t name_v; /* a __name__ label: its value's offset in the payload; else -1 */
    Py_ssize_t name_n;
} RwPair;

typedef struct {
    RwPair *pairs;
    Py_ssize_t npairs, cappairs;
    uint32_t *slots; /* pair index + 1; 0: empty */
    Py_ssize_t mask;
} RwPairs;


typedef struct {
    uint8_t kind;
    Py_ssize_t start, len;
} RwPiece;

typedef struct {
    Py_ssize_t refs_off, refs_n;     /* into refs */
    Py_ssize_t pieces_off, pieces_n; /* into pieces */
    Py_ssize_t nsamples, nhist, nex;
    Py_ssize_t adopt_head, adopt_tail, adopt_next; /* adopted exemplar-only frames, -1: none */
    int skip;                                      /* adopted by another frame, or orphan */
    int orphan;                                    /* exemplar-only, no frame to join: out */
    int meta_len;
    uint8_t meta[40]; /* the Metadata payload: at most 3 x (tag + 10-byte varint) */
} RwFrame;

typedef struct {
    RwSymbols sym;
    RwPairs pairs;
    uint32_t *refs;
    Py_ssize_t nrefs, caprefs;
    RwPiece *pieces;
    Py_ssize_t npieces, cappieces;
    RwFrame *frames;
    Py_ssize_t nframes, capframes;
    Buf ex;                /* converted exemplar payloads */
    Py_ssize_t *ranges;    /* scratch: (start, end) pairs */
    Py_ssize_t nranges, capranges;
    uint32_t *scratch;     /* scratch: one exemplar's refs */
    Py_ssize_t nscratch, capscratch;
    PyObject *keep;        /* metadata values whose bytes the symbols point into */
    const char *prev_name; /* the last metric name looked up, and its Metadata payload */
    Py_ssize_t prev_n;
    int prev_valid, prev_len;
    uint8_t prev_meta[40];
} RwEnc;

static void enc_free(RwEnc *e) {
    PyMem_Free(e->sym.syms);
    PyMem_Free(e->sym.slots);
    PyMem_Free(e->pairs.pairs);
    PyMem_Free(e->pairs.slots);
    PyMem_Free(e->refs);
    PyMem_Free(e->pieces);
    PyMem_Free(e->frames);
    PyMem_Free(e->ex.data);
    PyMem_Free(e->ranges);
    PyMem_Free(e->scratch);
    Py_CLEAR(e->keep);
}

static int add_piece(RwEnc *e, uint8_t kind, Py_ssize_t start, Py_ssize_t len) {
    if (pb_reserve((void **)&e->pieces, &e->cappieces, e->npieces + 1, sizeof(RwPiece)) < 0)
        return -1;
    e->pieces[e->npieces].kind = kind;
    e->pieces[e->npieces].start = start;
    e->pieces[e->npieces].len = len;
    e->npieces++;
    return 0;
}

/* A Label payload's name and value (the last of each counts): 1, 0 (reference), -1. */
static int rw_label(const uint8_t *d, Py_ssize_t start, Py_ssize_t end, Py_ssize_t *name,
                    Py_ssize_t *nname, Py_ssize_t *value, Py_ssize_t *nvalue) {
    uint64_t number;
    int wt;
    Py_ssize_t vs, ve, pos = start;
    *name = *value = start;
    *nname = *nvalue = 0;
    while (pos < end) {
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) return 0;
        if (number != 1 && number != 2) continue;
        if (wt != 2) return 0;
        if (number == 1) {
            *name = vs;
            *nname = ve - vs;
        } else {
            *value = vs;
            *nvalue = ve - vs;
        }
    }
    return 1;
}

static int pairs_rehash(RwPairs *t, Py_ssize_t capacity) {
    uint32_t *slots = PyMem_Calloc((size_t)capacity, sizeof(uint32_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < t->npairs; k++) {
        Py_ssize_t i = (Py_ssize_t)(t->pairs[k].h & (uint64_t)(capacity - 1));
        while (slots[i]) i = (i + 1) & (capacity - 1);
        slots[i] = (uint32_t)(k + 1);
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = capacity - 1;
    return 0;
}

/* The pair of d[start:end]: found (1, *out set), absent (0, *slot: where it goes), -1. */
static int pair_find(RwPairs *t, const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                     uint64_t *h, RwPair **out, Py_ssize_t *slot) {
    if (!t->slots && pairs_rehash(t, 1024) < 0) return -1;
    Py_ssize_t n = end - start;
    *h = rw_hash(d + start, n);
    Py_ssize_t i = (Py_ssize_t)(*h & (uint64_t)t->mask);
    while (t->slots[i]) {
        RwPair *q = &t->pairs[t->slots[i] - 1];
        if (q->h == *h && q->n == n && memcmp(q->p, d + start, (size_t)n) == 0) {
            *out = q;
            return 1;
        }
        i = (i + 1) & t->mask;
    }
    *slot = i;
    return 0;
}

static int pair_add(RwPairs *t, Py_ssize_t slot, const RwPair *pair) {
    if (t->npairs >= (Py_ssize_t)UINT32_MAX - 1) return 0; /* not cached: still correct */
    if (pb_reserve((void **)&t->pairs, &t->cappairs, t->npairs + 1, sizeof(RwPair)) < 0)
        return -1;
    t->pairs[t->npairs] = *pair;
    t->slots[slot] = (uint32_t)(++t->npairs);
    if (2 * t->npairs > t->mask + 1) return pairs_rehash(t, 2 * (t->mask + 1));
    return 0;
}

/* The refs (and __name__ value) of a Label payload, symbolized when new: 1, 0, -1. */
static int label_pair(RwEnc *e, const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                      RwPair *out) {
    uint64_t h;
    RwPair *found;
    Py_ssize_t slot;
    int r = pair_find(&e->pairs, d, start, end, &h, &found, &slot);
    if (r < 0) return -1;
    if (r == 1) {
        *out = *found;
        return 1;
    }
    Py_ssize_t nm, nn, vl, vn;
    r = rw_label(d, start, end, &nm, &nn, &vl, &vn);
    if (r <= 0) return r;
    int64_t a = sym_ref(&e->sym, (const char *)d + nm, nn);
    if (a < 0) return -1;
    int64_t b = sym_ref(&e->sym, (const char *)d + vl, vn);
    if (b < 0) return -1;
    int is_name = nn == 8 && memcmp(d + nm, "__name__", 8) == 0;
    RwPair pair = {(const char *)d + start, end - start, h, (uint32_t)a, (uint32_t)b,
                   is_name ? vl - start : -1, vn};
    *out = pair;
    return pair_add(&e->pairs, slot, &pair) < 0 ? -1 : 1;
}

/* Symbolize a Label payload into dst (two refs appended), noting the first __name__ value
 * (when name_at is given): 1, 0, -1. */
static int label_refs(RwEnc *e, const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                      uint32_t **dst, Py_ssize_t *n, Py_ssize_t *cap, Py_ssize_t *name_at,
                      Py_ssize_t *name_n) {
    RwPair pair;
    int r = label_pair(e, d, start, end, &pair);
    if (r <= 0) return r;
    if (pb_reserve((void **)dst, cap, *n + 2, sizeof(uint32_t)) < 0) return -1;
    (*dst)[(*n)++] = pair.a;
    (*dst)[(*n)++] = pair.b;
    if (name_at && pair.name_v >= 0 && *name_at < 0) {
        *name_at = start + pair.name_v;
        *name_n = pair.name_n;
    }
    return 1;
}

static Py_ssize_t packed_size(const uint32_t *refs, Py_ssize_t n) {
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) size += varint_size(refs[i]);
    return size;
}

static char *put_packed(char *p, const uint32_t *refs, Py_ssize_t n) {
    if (!n) return p;
    *p++ = 0x0A;
    p = put_varint(p, (uint64_t)packed_size(refs, n));
    for (Py_ssize_t i = 0; i < n; i++) p = put_varint(p, refs[i]);
    return p;
}

/* Convert one Exemplar payload into the exemplar buffer (a piece): 1, 0, -1. */
static int convert_exemplar(RwEnc *e, const uint8_t *d, Py_ssize_t start, Py_ssize_t end) {
    uint64_t number;
    int wt;
    Py_ssize_t head, vs, ve, pos = start, rest = 0;
    e->nscratch = 0;
    e->nranges = 0;
    while (pos < end) {
        head = pos;
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) return 0;
        if (number == 1) {
            if (wt != 2) return 0;
            int r = label_refs(e, d, vs, ve, &e->scratch, &e->nscratch, &e->capscratch, NULL,
                               NULL);
            if (r <= 0) return r;
            continue;
        }
        if (pb_reserve((void **)&e->ranges, &e->capranges, e->nranges + 2,
                       sizeof(Py_ssize_t)) < 0)
            return -1;
        e->ranges[e->nranges++] = head;
        e->ranges[e->nranges++] = ve;
        rest += ve - head;
    }
    Py_ssize_t refs = packed_size(e->scratch, e->nscratch);
    Py_ssize_t size = (e->nscratch ? 1 + varint_size((uint64_t)refs) + refs : 0) + rest;
    if (buf_grow(&e->ex, size) < 0) return -1;
    char *p = put_packed(e->ex.data + e->ex.len, e->scratch, e->nscratch);
    for (Py_ssize_t k = 0; k < e->nranges; k += 2) {
        memcpy(p, d + e->ranges[k], (size_t)(e->ranges[k + 1] - e->ranges[k]));
        p += e->ranges[k + 1] - e->ranges[k];
    }
    if (add_piece(e, RW_EXEMPLAR, e->ex.len, size) < 0) return -1;
    e->ex.len += size;
    return 1;
}

/* The Metadata payload of a resolved value (None or (type, help, unit)) into f: 1, 0, -1. */
static int encode_meta(RwEnc *e, PyObject *v, RwFrame *f) {
    f->meta_len = 0;
    if (v == Py_None) return 1;
    if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 3) return 0;
    PyObject *kind = PyTuple_GET_ITEM(v, 0), *help = PyTuple_GET_ITEM(v, 1),
             *unit = PyTuple_GET_ITEM(v, 2);
    if (!PyLong_CheckExact(kind) || !PyBytes_CheckExact(help) || !PyBytes_CheckExact(unit))
        return 0;
    unsigned long long type = PyLong_AsUnsignedLongLong(kind);
    if (type == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too large: the reference decides */
        return 0;
    }
    if (PyList_Append(e->keep, v) < 0) return -1;
    int64_t h = sym_ref(&e->sym, PyBytes_AS_STRING(help), PyBytes_GET_SIZE(help));
    if (h < 0) return -1;
    int64_t u = sym_ref(&e->sym, PyBytes_AS_STRING(unit), PyBytes_GET_SIZE(unit));
    if (u < 0) return -1;
    char *p = (char *)f->meta;
    if (type) {
        *p++ = 0x08;
        p = put_varint(p, type);
    }
    if (h) {
        *p++ = 0x18;
        p = put_varint(p, (uint64_t)h);
    }
    if (u) {
        *p++ = 0x20;
        p = put_varint(p, (uint64_t)u);
    }
    f->meta_len = (int)(p - (char *)f->meta);
    return 1;
}

/* The metadata of a frame whose metric name is d[at:at+n] (at < 0: none): 1, 0, -1. */
static int frame_meta(RwEnc *e, const uint8_t *d, Py_ssize_t at, Py_ssize_t n, RwFrame *f,
                      PyObject *memo, PyObject *resolve) {
    f->meta_len = 0;
    if (at < 0) return 1;
    const char *name = (const char *)d + at;
    if (e->prev_valid && e->prev_n == n && memcmp(e->prev_name, name, (size_t)n) == 0) {
        memcpy(f->meta, e->prev_meta, (size_t)e->prev_len);
        f->meta_len = e->prev_len;
        return 1;
    }
    PyObject *key = PyBytes_FromStringAndSize(name, n);
    if (!key) return -1;
    PyObject *v = PyDict_GetItemWithError(memo, key);
    if (v) {
        Py_INCREF(v);
    } else if (!PyErr_Occurred()) {
        v = PyObject_CallOneArg(resolve, key);
    }
    Py_DECREF(key);
    if (!v) return -1;
    int r = encode_meta(e, v, f);
    Py_DECREF(v);
    if (r == 1) {
        e->prev_valid = 1;
        e->prev_name = name;
        e->prev_n = n;
        e->prev_len = f->meta_len;
        memcpy(e->prev_meta, f->meta, (size_t)f->meta_len);
    }
    return r;
}

/* Parse one TimeSeries payload into a new frame: 1, 0, -1. Symbols in the reference's order:
 * labels, then exemplar labels, then metadata help and unit. */
static int parse_frame(RwEnc *e, const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                       PyObject *memo, PyObject *resolve) {
    if (pb_reserve((void **)&e->frames, &e->capframes, e->nframes + 1, sizeof(RwFrame)) < 0)
        return -1;
    RwFrame *f = &e->frames[e->nframes];
    memset(f, 0, sizeof(*f));
    f->refs_off = e->nrefs;
    f->pieces_off = e->npieces;
    f->adopt_head = f->adopt_tail = f->adopt_next = -1;
    Py_ssize_t name_at = -1, name_n = 0, head, vs, ve, pos = start;
    e->nranges = 0;
    uint64_t number;
    int wt, r;
    while (pos < end) {
        head = pos;
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) return 0;
        if (number >= 1 && number <= 4 && wt != 2) return 0;
        if (number == 1) {
            r = label_refs(e, d, vs, ve, &e->refs, &e->nrefs, &e->caprefs, &name_at, &name_n);
            if (r <= 0) return r;
        } else if (number == 2) {
            if (add_piece(e, RW_SAMPLE, head, ve - head) < 0) return -1;
            f->nsamples++;
        } else if (number == 4) {
            if (add_piece(e, RW_HIST, vs, ve - vs) < 0) return -1;
            f->nhist++;
        } else if (number == 3) { /* converted after the labels, as the reference does */
            if (pb_reserve((void **)&e->ranges, &e->capranges, e->nranges + 2,
                           sizeof(Py_ssize_t)) < 0)
                return -1;
            e->ranges[e->nranges++] = vs;
            e->ranges[e->nranges++] = ve;
        }
    }
    /* convert_exemplar reuses the ranges scratch: take the exemplar ranges out first */
    Py_ssize_t nex = e->nranges / 2;
    if (nex) {
        Py_ssize_t *ranges = PyMem_Malloc((size_t)e->nranges * sizeof(Py_ssize_t));
        if (!ranges) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(ranges, e->ranges, (size_t)e->nranges * sizeof(Py_ssize_t));
        for (Py_ssize_t k = 0; k < nex; k++) {
            r = convert_exemplar(e, d, ranges[2 * k], ranges[2 * k + 1]);
            if (r <= 0) {
                PyMem_Free(ranges);
                return r;
            }
        }
        PyMem_Free(ranges);
    }
    f->nex = nex;
    f->refs_n = e->nrefs - f->refs_off;
    f->pieces_n = e->npieces - f->pieces_off;
    r = frame_meta(e, d, name_at, name_n, f, memo, resolve);
    if (r <= 0) return r;
    e->nframes++;
    return 1;
}

/* -- adoption of exemplar-only frames ---------------------------------------------------- */

/* A frame's refs; NULL when it has none (e->refs may be NULL then: no offset is added to it,
 * which is undefined behaviour even for 0). */
static const uint32_t *frame_refs(const RwEnc *e, const RwFrame *f) {
    return f->refs_n ? e->refs + f->refs_off : NULL;
}

static int refs_equal(RwEnc *e, RwFrame *a, RwFrame *b) {
    /* no label in the whole body leaves e->refs NULL: memcmp must not see it */
    return a->refs_n == b->refs_n &&
           (!a->refs_n || memcmp(e->refs + a->refs_off, e->refs + b->refs_off,
                                 (size_t)a->refs_n * sizeof(uint32_t)) == 0);
}

static uint64_t refs_hash(RwEnc *e, RwFrame *f) {
    return rw_hash((const uint8_t *)frame_refs(e, f), f->refs_n * (Py_ssize_t)sizeof(uint32_t));
}

static int exemplars_only(RwFrame *f) { return f->nex && !f->nsamples && !f->nhist; }

/* Exemplar-only frames join the first frame with their labels that has samples or
 * histograms, or are left out (orphans) when there is none (the reference's _adopt): 0, or
 * -1 (MemoryError). */
static int adopt(RwEnc *e) {
    Py_ssize_t n = e->nframes, any = 0;
    for (Py_ssize_t i = 0; i < n && !any; i++) any = exemplars_only(&e->frames[i]);
    if (!any) return 0;
    Py_ssize_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    Py_ssize_t *slots = PyMem_Malloc((size_t)cap * sizeof(Py_ssize_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cap; i++) slots[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) { /* the first frame with data, per label set */
        RwFrame *f = &e->frames[i];
        if (!f->nsamples && !f->nhist) continue;
        Py_ssize_t s = (Py_ssize_t)(refs_hash(e, f) & (uint64_t)(cap - 1));
        while (slots[s] >= 0 && !refs_equal(e, &e->frames[slots[s]], f)) s = (s + 1) & (cap - 1);
        if (slots[s] < 0) slots[s] = i;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        RwFrame *f = &e->frames[i];
        if (!exemplars_only(f)) continue;
        Py_ssize_t s = (Py_ssize_t)(refs_hash(e, f) & (uint64_t)(cap - 1));
        while (slots[s] >= 0 && !refs_equal(e, &e->frames[slots[s]], f)) s = (s + 1) & (cap - 1);
        if (slots[s] < 0) {
            f->skip = f->orphan = 1;
            continue;
        }
        RwFrame *t = &e->frames[slots[s]];
        if (t->adopt_tail < 0)
            t->adopt_head = i;
        else
            e->frames[t->adopt_tail].adopt_next = i;
        t->adopt_tail = i;
        f->skip = 1;
    }
    PyMem_Free(slots);
    return 0;
}

/* -- emission ---------------------------------------------------------------------------- */

static Py_ssize_t field_size(Py_ssize_t len) { return 1 + varint_size((uint64_t)len) + len; }

/* Bytes of the kind-`kind` pieces of f as fields (samples are whole fields already). */
static Py_ssize_t pieces_size(RwEnc *e, RwFrame *f, uint8_t kind) {
    Py_ssize_t size = 0;
    for (Py_ssize_t k = f->pieces_off; k < f->pieces_off + f->pieces_n; k++) {
        RwPiece *p = &e->pieces[k];
        if (p->kind == kind) size += kind == RW_SAMPLE ? p->len : field_size(p->len);
    }
    return size;
}

static char *put_pieces(RwEnc *e, RwFrame *f, uint8_t kind, const char *body, char *out) {
    for (Py_ssize_t k = f->pieces_off; k < f->pieces_off + f->pieces_n; k++) {
        RwPiece *p = &e->pieces[k];
        if (p->kind != kind) continue;
        const char *src = kind == RW_EXEMPLAR ? e->ex.data : body;
        if (kind != RW_SAMPLE) {
            *out++ = kind == RW_HIST ? 0x1A : 0x22;
            out = put_varint(out, (uint64_t)p->len);
        }
        memcpy(out, src + p->start, (size_t)p->len);
        out += p->len;
    }
    return out;
}

/* Bytes of the exemplars of f and of the frames it adopted, as fields. */
static Py_ssize_t exemplars_size(RwEnc *e, RwFrame *f) {
    Py_ssize_t size = pieces_size(e, f, RW_EXEMPLAR);
    for (Py_ssize_t j = f->adopt_head; j >= 0; j = e->frames[j].adopt_next)
        size += pieces_size(e, &e->frames[j], RW_EXEMPLAR);
    return size;
}

static char *put_exemplars(RwEnc *e, RwFrame *f, char *out) {
    out = put_pieces(e, f, RW_EXEMPLAR, NULL, out);
    for (Py_ssize_t j = f->adopt_head; j >= 0; j = e->frames[j].adopt_next)
        out = put_pieces(e, &e->frames[j], RW_EXEMPLAR, NULL, out);
    return out;
}

/* One TimeSeries field: labels_refs, the pieces of `kind` (-1: none), the exemplars of f and
 * its adopted frames when `exemplars`, metadata. 0, or -1 (MemoryError). */
static int put_series(RwEnc *e, RwFrame *f, int kind, int exemplars, const char *body,
                      Buf *out) {
    const uint32_t *refs = frame_refs(e, f);
    Py_ssize_t size = (f->refs_n ? field_size(packed_size(refs, f->refs_n)) : 0) +
                      field_size(f->meta_len);
    if (kind >= 0) size += pieces_size(e, f, (uint8_t)kind);
    if (exemplars) size += exemplars_size(e, f);
    if (buf_grow(out, field_size(size)) < 0) return -1;
    char *p = out->data + out->len;
    *p++ = 0x2A;
    p = put_varint(p, (uint64_t)size);
    p = put_packed(p, refs, f->refs_n);
    if (kind >= 0) p = put_pieces(e, f, (uint8_t)kind, body, p);
    if (exemplars) p = put_exemplars(e, f, p);
    *p++ = 0x2A;
    p = put_varint(p, (uint64_t)f->meta_len);
    memcpy(p, f->meta, (size_t)f->meta_len);
    p += f->meta_len;
    out->len = p - out->data;
    return 0;
}

/* The series of one frame (the reference's _emit): 0, or -1. */
static int put_frame(RwEnc *e, RwFrame *f, const char *body, Buf *out) {
    int exemplars = 1;
    if (f->nsamples) {
        if (put_series(e, f, RW_SAMPLE, 1, body, out) < 0) return -1;
        exemplars = 0;
    }
    if (f->nhist) return put_series(e, f, RW_HIST, exemplars, body, out);
    if (!f->nsamples) return put_series(e, f, -1, 1, body, out);
    return 0;
}

static int put_symbols(RwEnc *e, Buf *out) {
    for (Py_ssize_t k = 0; k < e->sym.nsyms; k++) {
        RwSym *s = &e->sym.syms[k];
        if (buf_grow(out, field_size(s->n)) < 0) return -1;
        char *p = out->data + out->len;
        *p++ = 0x22;
        p = put_varint(p, (uint64_t)s->n);
        memcpy(p, s->p, (size_t)s->n);
        out->len = p + s->n - out->data;
    }
    return 0;
}

/* Parse every frame of the body: 1, 0 (reference), -1. */
static int parse_body(RwEnc *e, const uint8_t *d, Py_ssize_t n, PyObject *memo,
                      PyObject *resolve) {
    Py_ssize_t pos = 0, vs, ve;
    uint64_t number;
    int wt;
    while (pos < n) {
        if (d[pos] != 0x0A) return 0; /* another top-level field: the reference */
        if (!rw_field(d, &pos, n, &number, &wt, &vs, &ve)) return 0;
        int r = parse_frame(e, d, vs, ve, memo, resolve);
        if (r <= 0) return r;
    }
    return 1;
}

/* Compiled rwrouter.wire.rw2_out.encode_request_py(body, memo, resolve). */
static PyObject *encode_v2(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyDict_CheckExact(args[1]))
        return call_reference("rwrouter.wire.rw2_out", "encode_request_py", args, nargs);
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    RwEnc e;
    memset(&e, 0, sizeof(e));
    Buf out = {NULL, 0, 0};
    PyObject *result = NULL;
    e.keep = PyList_New(0);
    if (!e.keep || sym_init(&e.sym) < 0) goto done;
    int r = parse_body(&e, d, n, args[1], args[2]);
    if (r < 0) goto done;
    if (r == 0) {
        result = call_reference("rwrouter.wire.rw2_out", "encode_request_py", args, nargs);
        goto done;
    }
    if (adopt(&e) < 0 || put_symbols(&e, &out) < 0) goto done;
    long long samples = 0, hist = 0, ex = 0, orphans = 0;
    for (Py_ssize_t i = 0; i < e.nframes; i++) {
        RwFrame *f = &e.frames[i];
        if (f->orphan) {
            orphans += f->nex;
            continue;
        }
        samples += f->nsamples;
        hist += f->nhist;
        ex += f->nex;
        if (!f->skip && put_frame(&e, f, (const char *)d, &out) < 0) goto done;
    }
    PyObject *request = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    if (request) result = Py_BuildValue("(NLLLL)", request, samples, hist, ex, orphans);
done:
    PyMem_Free(out.data);
    enc_free(&e);
    return result;
}

/* -- strip_start_timestamps -------------------------------------------------------------- */

/* The size of a message payload without its fields `drop`, counting them: >= 0, or -1
 * (malformed: the reference). */
static Py_ssize_t without_size(const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                               uint64_t drop, long long *removed) {
    Py_ssize_t pos = start, head, vs, ve, size = 0;
    uint64_t number;
    int wt;
    while (pos < end) {
        head = pos;
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) return -1;
        if (number == drop)
            (*removed)++;
        else
            size += pos - head;
    }
    return size;
}

static char *put_without(const uint8_t *d, Py_ssize_t start, Py_ssize_t end, uint64_t drop,
                         char *p) {
    Py_ssize_t pos = start, head, vs, ve;
    uint64_t number = 0;
    int wt = 0;
    while (pos < end) {
        head = pos;
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) /* checked by without_size */
            break;
        if (number != drop) {
            memcpy(p, d + head, (size_t)(pos - head));
            p += pos - head;
        }
    }
    return p;
}

/* Walk a TimeSeries payload; with p NULL, its size once stripped (and count), else write it
 * there. >= 0 (size), or -1 (malformed: the reference). */
static Py_ssize_t strip_series(const uint8_t *d, Py_ssize_t start, Py_ssize_t end,
                               long long *removed, char **p) {
    Py_ssize_t pos = start, head, vs, ve, size = 0;
    uint64_t number;
    int wt;
    while (pos < end) {
        head = pos;
        if (!rw_field(d, &pos, end, &number, &wt, &vs, &ve)) return -1;
        if ((number == 2 || number == 4) && wt == 2) {
            uint64_t drop = number == 2 ? 3 : 17;
            long long n = 0;
            Py_ssize_t inner = without_size(d, vs, ve, drop, &n);
            if (inner < 0) return -1;
            if (n) {
                *removed += n;
                size += field_size(inner);
                if (p) {
                    *(*p)++ = number == 2 ? 0x12 : 0x22;
                    *p = put_varint(*p, (uint64_t)inner);
                    *p = put_without(d, vs, ve, drop, *p);
                }
                continue;
            }
        }
        size += pos - head;
        if (p) {
            memcpy(*p, d + head, (size_t)(pos - head));
            *p += pos - head;
        }
    }
    return size;
}

/* Walk the body (frames); with out NULL, the stripped size and count, else write it. */
static Py_ssize_t strip_body(const uint8_t *d, Py_ssize_t n, long long *removed, char **out) {
    Py_ssize_t pos = 0, head, vs, ve, size = 0;
    uint64_t number;
    int wt;
    while (pos < n) {
        head = pos;
        if (!rw_field(d, &pos, n, &number, &wt, &vs, &ve)) return -1;
        if (number == 1 && wt == 2) {
            long long k = 0;
            Py_ssize_t inner = strip_series(d, vs, ve, &k, NULL);
            if (inner < 0) return -1;
            if (k) {
                *removed += k;
                size += field_size(inner);
                if (out) {
                    *(*out)++ = 0x0A;
                    *out = put_varint(*out, (uint64_t)inner);
                    strip_series(d, vs, ve, &k, out);
                }
                continue;
            }
        }
        size += pos - head;
        if (out) {
            memcpy(*out, d + head, (size_t)(pos - head));
            *out += pos - head;
        }
    }
    return size;
}

/* Compiled rwrouter.wire.rw2_out.strip_start_timestamps_py(body). */
static PyObject *strip_start_timestamps(PyObject *module, PyObject *body) {
    (void)module;
    if (!PyBytes_CheckExact(body))
        return call_reference("rwrouter.wire.rw2_out", "strip_start_timestamps_py", &body, 1);
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(body);
    Py_ssize_t n = PyBytes_GET_SIZE(body);
    long long removed = 0;
    Py_ssize_t size = strip_body(d, n, &removed, NULL);
    if (size < 0)
        return call_reference("rwrouter.wire.rw2_out", "strip_start_timestamps_py", &body, 1);
    if (!removed) return Py_BuildValue("(Oi)", body, 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return NULL;
    char *p = PyBytes_AS_STRING(out);
    long long again = 0;
    strip_body(d, n, &again, &p);
    return Py_BuildValue("(NL)", out, removed);
}
