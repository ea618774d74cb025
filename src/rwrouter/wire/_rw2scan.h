/*
 * Remote write 2.0 routed without its RW1 form, compiled: rwrouter.routing.scan.scan_rw2_py
 * (convert with rw2_in.to_rw1, then scan_request) as
 * scan_rw2(data, max_bytes, young, old, miss, filters, filt, reasons, templates, names, legacy,
 * plan, review) -> (scan tuple, samples, histograms, exemplars, start_timestamps), or None when the
 * reference is to decide (then nothing of this call is kept but what it cached). Included by
 * _scan.c after _rw2in.h: it uses the Scanner of scan_request and the R2 of rw2_to_rw1.
 *
 * The conversion writes every series out in the RW1 form (labels resolved from the symbols
 * table, ~5 times the RW 2.0 request) and scan_request then reads it all again. Here each
 * series of the usual shape (labels_refs, then Sample fields of the usual shapes, then an
 * optional Metadata) has only its RW1 labels written, into one scratch buffer: what the miss
 * path routes and a destination keeping the labels gets; its samples go out as the request has
 * them (RW 2.0 Sample fields 1 and 2 are RW 1.0's, the field number of the samples is 2 in
 * both). A series of another shape (histograms, exemplars, start timestamps, unknown fields)
 * is converted on its own, as rw2_to_rw1 converts it, and scanned as scan_request scans an
 * RW 1.0 series. The metadata become RW1 MetricMetadata entries as the conversion makes
 * them, after the series.
 *
 * The routing cache digest of such a series is folded from its Label fields' hashes (each
 * distinct field of a request hashed once, in the table of them the loop keeps: lc_fold), not
 * hashed from its bytes: a key space of its own (the same label set sent as RW 1.0 has
 * another entry). Not so with dict generations (keys are the bytes), a route escaping names
 * (its collision memory looks label sets up by their bytes' digest), or where every miss is
 * the caller's miss() (no plan, no templates: it caches under the bytes' digest).
 *
 * Anything malformed, over max_bytes (the size of the RW1 form), or an error while routing
 * (e.g. invalid labels) hands the whole request back: the caller converts and scans it with
 * the reference, which gives the reference's error (the same for either path).
 *
 * Sources: RW 2.0 spec (2.0-rc.4), Prometheus prompb/io/prometheus/write/v2/types.proto.
 */

#define R2_AHEAD 8 /* series written out and hashed ahead of the one routed (a power of two) */

/* A series on its way: prepared (labels written, hashed, its cache slot prefetched), then
 * routed R2_AHEAD series later, so the slot is in the CPU cache by then (scan_request's
 * prehash does the same for RW 1.0). */
typedef struct {
    Series t;
    Buf key; /* R2_HEAD bytes of room, then t's key (the RW1 labels) and samples: t's frame */
    Digest g;
    int step; /* SCAN_OK: the usual shape; SCAN_BAIL: another (converted on its own) */
    Py_ssize_t begin, end;
    uint64_t meta[3];
    R2Span metric; /* the value of the first __name__ (len 0: none) */
} R2Ahead;

#define R2_SHORT 64          /* bytes of a Label field copied at once (at most) */
_Static_assert(R2_SHORT == 64, "copy32 and copy64 copy the halves and the whole of R2_SHORT");
#define R2_HEAD 16           /* room for a series field's tag and length before its labels */
#define R2_PAIRS 2048        /* Label fields remembered (a power of two) */
#define R2_LABELS (1 << 20)  /* bytes of them: past it, they are forgotten */

/* The Label field of refs (name, value) encoded to c->labels and remembered in c->pairs (a
 * node's series repeat most of their labels): the entry, or NULL (MemoryError). */
static R2Pair *r2_pair(R2 *c, R2Pair *e, uint32_t name_ref, uint32_t value_ref) {
    const R2Span *name = &c->sym.items[name_ref], *value = &c->sym.items[value_ref];
    Py_ssize_t inner = r2_label_inner(name, value), size = 1 + varint_size((uint64_t)inner) + inner;
    if (c->labels.len + size > R2_LABELS) { /* forget them all: the memory stays bounded */
        memset(c->pairs, 0xFF, sizeof(R2Pair) * R2_PAIRS); /* all empty */
        c->labels.len = 0;
    }
    if (buf_grow(&c->labels, size + R2_SHORT) < 0) return NULL;
    char *p = c->labels.data + c->labels.len;
    *p++ = 0x0A;
    p = put_varint(p, (uint64_t)inner);
    p = r2_put_string(p, 0x0A, c->d + name->start, name->len);
    r2_put_string(p, 0x12, c->d + value->start, value->len);
    Digest hash = {0, 0};
    if (c->fold) hash = lc_hash128((const uint8_t *)c->labels.data + c->labels.len, size);
    *e = (R2Pair){name_ref, value_ref, (uint32_t)c->labels.len, (uint32_t)size, hash};
    c->labels.len += size;
    return e;
}

/* Where r2_put_pairs is: the refs' position, the pairs written and the end of them, the
 * fold of their hashes, whether the metric name is known (or not wanted). */
typedef struct {
    Py_ssize_t pos, npairs;
    char *p;
    Digest g;
    int named;
} R2Put;

/* With the name wanted and not known: the value of a Label field (name, value) named
 * __name__ (a non-empty one) to a->metric; whether the name is known now. */
static inline __attribute__((always_inline)) int r2_named(const R2 *c, R2Ahead *a,
                                                          uint64_t name, uint64_t value) {
    const R2Span *sym = c->sym.items;
    if (sym[name].len != 8 || memcmp(c->d + sym[name].start, "__name__", 8)) return 0;
    a->metric = sym[value];
    return sym[value].len > 0;
}

/* One Label field of r2_put_pairs (the pair of refs at s->pos), the slow way: what its loop
 * leaves (a ref of three bytes or more, a pair not in the table yet, more room needed in
 * a->key), and what it checks (refs outside the table, an odd number of them). R2_OK (s
 * moved past it), R2_BAIL (malformed, or the labels over c->limit: the conversion decides),
 * R2_ERR (MemoryError). */
static __attribute__((noinline)) int r2_put_slow(R2 *c, R2Ahead *a, R2Put *s, Py_ssize_t to) {
    const uint8_t *d = c->d;
    uint64_t name, value, nsym = (uint64_t)c->sym.n;
    if (!read_varint(d, &s->pos, to, &name) || name >= nsym || s->pos >= to ||
        !read_varint(d, &s->pos, to, &value) || value >= nsym)
        return R2_BAIL;
    R2Pair *e = &c->pairs[((uint32_t)name * 0x9E3779B1u ^ (uint32_t)value) & (R2_PAIRS - 1)];
    if ((e->name != name || e->value != value) &&
        !(e = r2_pair(c, e, (uint32_t)name, (uint32_t)value)))
        return R2_ERR;
    Py_ssize_t len = e->len, at = s->p - a->key.data;
    if (at + len + R2_SHORT > a->key.cap) { /* more room (R2_SHORT past the labels) */
        if (r2_over(c, at - R2_HEAD + len)) return R2_BAIL;
        a->key.len = at;
        if (buf_grow(&a->key, len + R2_SHORT) < 0) return R2_ERR;
        s->p = a->key.data + at;
    }
    memcpy(s->p, c->labels.data + e->off, (size_t)len);
    s->p += len;
    s->npairs++;
    lc_fold(&s->g, e->hash);
    if (!s->named) s->named = r2_named(c, a, name, value);
    return R2_OK;
}

/* The Label fields of the refs of the labels_refs field d[from:to] (packed) written to a->key
 * from R2_HEAD on (its room for R2_HEAD + R2_SHORT bytes reserved), read, looked up and
 * copied in one pass; a->key.len their end, R2_SHORT bytes of room after it; with `named` 0,
 * the value of the first __name__ (with a non-empty value) to a->metric; with c->fold, a->g
 * folded from their hashes. R2_OK, R2_BAIL (a ref outside the table, an odd number of them,
 * malformed, or the labels over c->limit: the conversion decides), R2_ERR (MemoryError).
 *
 * The loop makes no call: every value it keeps stays in a register (a call in it, even one
 * rarely made, puts them on the stack, and each Label field waits on reloads). What it does
 * not take (see r2_put_slow) ends it; r2_put_slow takes that one field, and the loop goes on
 * from the next. Inlined four times: with and without the name wanted (only with metadata),
 * for a table of 128 symbols or more (`large`: every one-byte ref is inside it) and a
 * smaller one. */
static inline __attribute__((always_inline)) int r2_put_pairs(R2 *c, R2Ahead *a,
                                                              Py_ssize_t from, Py_ssize_t to,
                                                              int named, int large) {
    R2Put s = {from, 0, a->key.data + R2_HEAD, lc_fold_start(), named};
    for (;;) {
        const uint8_t *d = c->d;
        const R2Pair *pairs = c->pairs;
        const char *labels = c->labels.data, *room = a->key.data + a->key.cap - R2_SHORT;
        uint64_t nsym = (uint64_t)c->sym.n;
        Py_ssize_t pos = s.pos, npairs = s.npairs;
        char *p = s.p;
        Digest g = s.g;
        int known = s.named;
        while (pos < to) {
            uint64_t name = d[pos], value;
            Py_ssize_t next = pos + 1;
            if (name >= 0x80) { /* two bytes (a table of up to 16384 symbols), else slow */
                if (next >= to || d[next] >= 0x80) break;
                name = (name & 0x7F) | (uint64_t)d[next++] << 7;
                if (name >= nsym) break;
            } else if (!large && name >= nsym) {
                break;
            }
            if (next >= to) break;
            value = d[next++];
            if (value >= 0x80) {
                if (next >= to || d[next] >= 0x80) break;
                value = (value & 0x7F) | (uint64_t)d[next++] << 7;
                if (value >= nsym) break;
            } else if (!large && value >= nsym) {
                break;
            }
            const R2Pair *e = &pairs[((uint32_t)name * 0x9E3779B1u ^ (uint32_t)value) &
                                     (R2_PAIRS - 1)];
            uint32_t refs2[2] = {(uint32_t)name, (uint32_t)value};
            uint64_t want, have; /* the refs compared at once (an empty entry's match none) */
            memcpy(&want, refs2, 8);
            memcpy(&have, &e->name, 8);
            Py_ssize_t len = e->len;
            if (have != want || p + len > room) break;
            const char *field = labels + e->off; /* R2_SHORT bytes there (grown so) */
            if (len <= R2_SHORT / 2) /* fixed sizes: a few vector moves */
                copy32(p, field);
            else if (len <= R2_SHORT)
                copy64(p, field);
            else
                break;
            p += len;
            npairs++;
            lc_fold(&g, e->hash);
            if (!named && !known) known = r2_named(c, a, name, value);
            pos = next;
        }
        s = (R2Put){pos, npairs, p, g, known};
        if (pos >= to) break;
        int k = r2_put_slow(c, a, &s, to);
        if (k != R2_OK) return k;
    }
    a->key.len = s.p - a->key.data;
    if (c->fold) a->g = lc_folded(s.g, s.npairs);
    return R2_OK;
}

static int r2_plain_labels(R2 *c, R2Ahead *a, Py_ssize_t from, Py_ssize_t to) {
    int large = c->sym.n >= 0x80;
    if (!(a->meta[0] || a->meta[1] || a->meta[2])) /* no name wanted */
        return large ? r2_put_pairs(c, a, from, to, 1, 1) : r2_put_pairs(c, a, from, to, 1, 0);
    return large ? r2_put_pairs(c, a, from, to, 0, 1) : r2_put_pairs(c, a, from, to, 0, 0);
}

/* A series d[a->begin:a->end] of the usual shape (see above) prepared in a: its series field
 * written to a->key (R2_HEAD bytes of room, then its RW1 labels: the Series' key, then its
 * samples d[first:last] as they are; the tag and length just before the labels: the Series'
 * frame), its metadata merged into a->meta. SCAN_OK, SCAN_BAIL (another shape: converted on
 * its own; or malformed), SCAN_ERR. */
static int r2_plain_series(Scanner *r, R2 *c, R2Ahead *a) {
    const uint8_t *d = c->d;
    Py_ssize_t pos = a->begin, end = a->end, first = -1, last = -1, at = pos;
    Py_ssize_t from = -1, to = -1; /* the labels_refs field's value (packed refs) */
    Series *t = &a->t;
    PbField f;
    int more = 0;
    while (pos < end) {
        uint8_t tag = d[pos];
        /* the usual fields (labels_refs, samples, metadata: one-byte tag and length) taken
         * here, the others by the general walker */
        if ((tag == 0x0A || tag == 0x12 || tag == 0x2A) && end - pos >= 2 && d[pos + 1] < 0x80 &&
            d[pos + 1] <= end - pos - 2) {
            f.field = tag >> 3;
            f.wire = 2;
            f.vstart = pos + 2;
            f.vend = pos = pos + 2 + d[pos + 1];
        } else if ((more = pb_next(d, &pos, end, &f)) != 1) {
            break;
        }
        if (f.field == 1 && f.wire == 2 && from < 0 && first < 0) { /* one, packed, first */
            from = f.vstart;
            to = f.vend;
        } else if (f.field == 2 && f.wire == 2 && (first < 0 || last == at)) {
            if (first < 0) first = at;
            last = pos;
        } else if (f.field != 5 || f.wire != 2 || !r2_metadata(d, f.vstart, f.vend, a->meta)) {
            return SCAN_BAIL;
        }
        at = pos;
    }
    if (more < 0) return SCAN_BAIL;
    if (first >= 0 && !(t->nsamples = plain_samples(d, first, last))) return SCAN_BAIL;
    Py_ssize_t nrest = first >= 0 ? last - first : 0;
    a->key.len = 0; /* room for the head, R2_SHORT bytes, and labels of a usual size */
    Py_ssize_t need = R2_HEAD + R2_SHORT + (from < 0 ? 0 : 24 * (to - from));
    if ((!a->key.data || need > a->key.cap) && buf_grow(&a->key, need) < 0) return SCAN_ERR;
    if (from >= 0) {
        int k = r2_plain_labels(c, a, from, to);
        if (k != R2_OK) return k == R2_ERR ? SCAN_ERR : SCAN_BAIL;
    } else {
        a->key.len = R2_HEAD; /* no labels (the route refuses them) */
    }
    if (nrest + R2_SHORT > a->key.cap - a->key.len && buf_grow(&a->key, nrest + R2_SHORT) < 0)
        return SCAN_ERR; /* the samples' room */
    Py_ssize_t nlabels = a->key.len - R2_HEAD, frame = r2_string_size(nlabels + nrest);
    if (r2_over(c, frame)) return SCAN_BAIL;
    c->limit -= frame;
    /* the series field as a destination keeping the labels sends it (tag, length, labels,
     * samples), written once here: a cached series is then one copy (write_field) */
    char *labels = a->key.data + R2_HEAD, *head = labels - (frame - nlabels - nrest);
    t->rest = (const char *)d + (first >= 0 ? first : pos);
    if (nrest && nrest <= R2_SHORT / 2 && first + R2_SHORT / 2 <= PyBytes_GET_SIZE(r->data))
        copy32(labels + nlabels, t->rest); /* (room for R2_SHORT more) */
    else if (nrest)
        memcpy(labels + nlabels, t->rest, (size_t)nrest);
    head[0] = 0x0A;
    put_varint(head + 1, (uint64_t)(nlabels + nrest));
    t->frame = head;
    t->nframe = frame;
    t->kp = labels;
    t->kn = nlabels;
    t->nrest = nrest;
    if (!r->label_caches && !(t->key = PyBytes_FromStringAndSize(t->kp, t->kn)))
        return SCAN_ERR; /* a dict needs a key object */
    return SCAN_OK;
}

/* Series i prepared in a (its cache slot prefetched). SCAN_OK (a->step says how it is to be
 * routed) or SCAN_ERR. */
static int r2_prepare(Scanner *r, R2 *c, R2Ahead *a, Py_ssize_t i) {
    a->begin = c->series.items[i].start;
    a->end = a->begin + c->series.items[i].len;
    a->meta[0] = a->meta[1] = a->meta[2] = 0;
    a->metric = (R2Span){0, 0};
    a->step = r2_plain_series(r, c, a);
    if (a->step == SCAN_ERR) return SCAN_ERR;
    if (a->step == SCAN_OK && r->label_caches) {
        if (!c->fold) a->g = lc_digest((const uint8_t *)a->t.kp, a->t.kn);
        lc_prefetch_slot((LabelCache *)r->young, a->g);
        if (((LabelCache *)r->old)->used) lc_prefetch_slot((LabelCache *)r->old, a->g);
    } else if (a->step == SCAN_BAIL) {
        series_reset(&a->t);
    }
    return SCAN_OK;
}

/* A series of another shape: converted on its own (r2_series, into c->out) and scanned as an
 * RW 1.0 series of those bytes. SCAN_OK, SCAN_BAIL, SCAN_ERR. */
static int r2_other_series(Scanner *r, R2 *c, Py_ssize_t pos, Py_ssize_t end, long long *counts,
                           int *start) {
    c->out.len = 0;
    int k = r2_series(c, pos, end, counts, start);
    if (k != R2_OK) return k == R2_ERR ? SCAN_ERR : SCAN_BAIL;
    c->limit -= c->out.len;
    Py_ssize_t at = 1, n = c->out.len;
    uint64_t len;
    const uint8_t *out = (const uint8_t *)c->out.data;
    if (!read_varint(out, &at, n, &len) || (uint64_t)(n - at) != len) return SCAN_BAIL;
    r->d = out;
    int step = scan_series(r, at, n);
    r->d = c->d;
    c->out.len = 0;
    return step;
}

/* Series a routed: SCAN_OK, SCAN_BAIL, SCAN_ERR. */
static int r2_route(Scanner *r, R2 *c, R2Ahead *a, long long *counts, int *start) {
    if (a->step != SCAN_OK) return r2_other_series(r, c, a->begin, a->end, counts, start);
    counts[0] += a->t.nsamples; /* (scan_series counts the other ones) */
    r->folded = c->fold;
    int step = route_series(r, (Py_ssize_t)r->series_in++, &a->t, r->label_caches ? &a->g : NULL);
    r->folded = 0;
    series_reset(&a->t);
    if (step != SCAN_OK || !(a->meta[0] || a->meta[1] || a->meta[2])) return step;
    int m = r2_add_metadata(c, a->meta, &a->metric);
    return m == R2_OK ? SCAN_OK : m == R2_ERR ? SCAN_ERR : SCAN_BAIL;
}

/* Every series of the request (each prepared R2_AHEAD series before it is routed), then its
 * metadata entries. SCAN_OK, SCAN_BAIL, SCAN_ERR. */
static int r2_scan_series(Scanner *r, R2 *c, R2Ahead *ahead, long long *counts, int *start) {
    Py_ssize_t n = c->series.n, mask = R2_AHEAD - 1;
    for (Py_ssize_t i = 0; i < n + R2_AHEAD; i++) {
        int step;
        if (i >= R2_AHEAD && (step = r2_route(r, c, &ahead[(i - R2_AHEAD) & mask], counts,
                                              start)) != SCAN_OK)
            return step;
        if (i < n && r2_prepare(r, c, &ahead[i & mask], i) < 0) return SCAN_ERR;
        R2Ahead *soon = &ahead[(i - R2_AHEAD / 2) & mask]; /* routed in R2_AHEAD / 2 */
        if (i >= R2_AHEAD / 2 && i - R2_AHEAD / 2 < n && soon->step == SCAN_OK &&
            r->label_caches)
            lc_prefetch_objects((LabelCache *)r->young, soon->g);
    }
    if (!c->nentries) return SCAN_OK;
    Py_ssize_t total = 0; /* the entries as RW1 MetricMetadata fields, checked as scan_request
                           * checks a request's */
    for (Py_ssize_t i = 0; i < c->nentries; i++) total += r2_string_size(c->entries[i].len);
    PyObject *tail = PyBytes_FromStringAndSize(NULL, total);
    if (!tail) return SCAN_ERR;
    char *p = PyBytes_AS_STRING(tail);
    int step = SCAN_OK;
    for (Py_ssize_t i = 0; step == SCAN_OK && i < c->nentries; i++) {
        char *q = r2_put_string(p, 0x1A, (const uint8_t *)c->meta.data + c->entries[i].off,
                                c->entries[i].len);
        Py_ssize_t vstart = (q - PyBytes_AS_STRING(tail)) - c->entries[i].len;
        step = scan_metadata(r, tail, vstart, q - PyBytes_AS_STRING(tail));
        p = q;
    }
    Py_DECREF(tail);
    return step;
}

/* max_bytes as rw2_to_rw1 takes it: 1 and *limit, 0 for the reference (another type, too
 * large, negative). */
static int r2_limit(PyObject *max_bytes, Py_ssize_t *limit) {
    *limit = PY_SSIZE_T_MAX;
    if (max_bytes == Py_None) return 1;
    *limit = PyLong_CheckExact(max_bytes) ? PyLong_AsSsize_t(max_bytes) : -1;
    if (*limit >= 0) return 1;
    PyErr_Clear();
    return 0;
}

static PyObject *scan_rw2(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 12 && nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "scan_rw2 takes 12 or 13 arguments");
        return NULL;
    }
    PyObject *data = args[0], *sargs[12];
    sargs[0] = data;
    for (Py_ssize_t i = 1; i < nargs - 1; i++) sargs[i] = args[i + 1];
    Scanner r;
    R2 c;
    memset(&r, 0, sizeof(r));
    memset(&c, 0, sizeof(c));
    int step = scan_arguments(&r, sargs, nargs - 1);
    if (step == SCAN_ERR) return NULL;
    /* the reference: types scan_request leaves to it, a limit rw2_to_rw1 leaves to it, a
     * request over 1 GiB (32-bit spans, and a Label field of two of its symbols under 4 GiB:
     * R2Pair.len) */
    if (step == SCAN_BAIL || !r2_limit(args[1], &c.limit) || !PyBytes_CheckExact(data) ||
        (uint64_t)PyBytes_GET_SIZE(data) > (UINT32_MAX >> 2))
        Py_RETURN_NONE;
    c.d = (const uint8_t *)PyBytes_AS_STRING(data);
    /* the series of the usual shape get digests folded from their Label fields' (a key space
     * of their own: the same label set sent as RW 1.0 has another entry) with LabelCache
     * generations, no escaping route (its collision memory looks label sets up by their
     * bytes: r.legacy), and misses answered here (the plan, or templates: miss() answers
     * only the first of each, and caches it under its bytes' digest, then this loop under
     * the folded one; without either, every miss would take two entries) */
    c.fold = r.label_caches && !r.legacy && (r.plan || r.use_templates);
    if (!(c.pairs = PyMem_Malloc(R2_PAIRS * sizeof(R2Pair)))) return PyErr_NoMemory();
    memset(c.pairs, 0xFF, R2_PAIRS * sizeof(R2Pair)); /* empty: refs no table has */
    R2Ahead ahead[R2_AHEAD];
    memset(ahead, 0, sizeof(ahead));
    long long counts[3] = {0, 0, 0};
    int start = 0;
    PyObject *result = NULL;
    step = SCAN_ERR;
    c.mask = 63;
    if (!(c.table = PyMem_Calloc((size_t)(c.mask + 1), sizeof(Py_ssize_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    if ((step = r2_request(&c, PyBytes_GET_SIZE(data))) != R2_OK) {
        step = step == R2_ERR ? SCAN_ERR : SCAN_BAIL;
        goto done;
    }
    /* the shares' room: the RW1 form is typically 4-6 times the request (grown past that) */
    Py_ssize_t room = PyBytes_GET_SIZE(data) < c.limit / 8 ? 8 * PyBytes_GET_SIZE(data) : c.limit;
    step = SCAN_ERR;
    if (scan_start(&r, room + 64, 0) < 0) goto done;
    step = r2_scan_series(&r, &c, ahead, counts, &start);
    if (step != SCAN_OK) goto done;
    PyObject *scan = scan_result(&r);
    if (scan)
        result = Py_BuildValue("(NLLLO)", scan, counts[0], counts[1], counts[2],
                               start ? Py_True : Py_False);
done:
    for (Py_ssize_t i = 0; i < R2_AHEAD; i++) {
        series_clear(&ahead[i].t);
        PyMem_Free(ahead[i].key.data);
    }
    scan_free(&r);
    r2_free(&c);
    /* an error routing (e.g. invalid labels; not running out of memory) goes to the
     * reference too: it meets the first of the request's errors, this loop maybe a later one */
    if (step == SCAN_ERR && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        step = SCAN_BAIL;
    }
    if (step == SCAN_BAIL) Py_RETURN_NONE;
    return result;
}
