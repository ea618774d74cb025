/* Protobuf walking shared by scan_request and the remote write 2.0 conversions (_rw2in.h,
 * _rw2out.h), included by _scan.c after its varint readers (read_varint, skip_varint,
 * MAX_FIELD_NUMBER). The framing and checks of rwrouter.wire.walk.fields: anything it refuses
 * is "malformed" here, and the callers hand such input to their Python reference. */

#ifndef RWROUTER_PBWALK_H
#define RWROUTER_PBWALK_H

typedef struct {
    uint64_t field;
    unsigned wire;
    Py_ssize_t vstart, vend; /* a LEN field's value excludes its length prefix */
} PbField;

/* The next field of d[*pos:end], framed as walk.fields frames it: 1 and *f, 0 at the end,
 * -1 when malformed. */
static inline int pb_next(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, PbField *f) {
    Py_ssize_t p = *pos;
    uint64_t tag, n;
    if (p >= end) return 0;
    if (!read_varint(d, &p, end, &tag)) return -1;
    f->field = tag >> 3;
    f->wire = (unsigned)(tag & 7);
    if (f->field == 0 || f->field > MAX_FIELD_NUMBER) return -1;
    f->vstart = p;
    if (f->wire == 0) {
        if (!skip_varint(d, &p, end)) return -1;
    } else if (f->wire == 2) {
        if (!read_varint(d, &p, end, &n) || n > (uint64_t)(end - p)) return -1;
        f->vstart = p;
        p += (Py_ssize_t)n;
    } else if (f->wire == 1 || f->wire == 5) {
        Py_ssize_t width = f->wire == 1 ? 8 : 4;
        if (end - p < width) return -1;
        p += width;
    } else {
        return -1;
    }
    f->vend = p;
    *pos = p;
    return 1;
}

/* A growable array of elem-sized items: room for `need` items, 0 ok, -1 (MemoryError). */
static int pb_reserve(void **data, Py_ssize_t *cap, Py_ssize_t need, size_t elem) {
    if (need <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    if ((size_t)c > (size_t)PY_SSIZE_T_MAX / elem) {
        PyErr_NoMemory();
        return -1;
    }
    void *p = PyMem_Realloc(*data, (size_t)c * elem);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    *data = p;
    *cap = c;
    return 0;
}

#endif
