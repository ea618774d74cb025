/*
 * LabelCache: the routing cache's generation as an open-addressing hash table keyed by raw
 * label bytes (included by _scan.c; part of the compiled accelerator).
 *
 * Why not a dict: a dict lookup needs a key object (a bytes copy of the labels, hashed with
 * SipHash) and reaches the key through an index array. Here a lookup takes the labels where
 * they are in the request (no copy, no allocation), hashes them with a fast multiply-mix hash,
 * and finds hash, key and value in one slot. Keys are still compared byte for byte: a hash
 * collision costs a probe, never a wrong answer.
 *
 * To Python it is a small mapping of bytes keys to bytes values (get, [], []=, in, len, clear,
 * items): the pure-Python loop and the Router use it like a dict.
 */

typedef struct {
    uint64_t hash;
    PyObject *key;   /* bytes, or NULL for an empty slot */
    PyObject *value; /* bytes */
} LCSlot;

typedef struct {
    PyObject_HEAD
    LCSlot *slots;
    Py_ssize_t mask; /* capacity - 1 (capacity a power of two) */
    Py_ssize_t used;
} LabelCache;

static PyTypeObject LabelCacheType;

#define LC_MIN_CAPACITY 1024

static inline uint64_t lc_load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t lc_fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* A fast 64-bit hash of a byte string (8 bytes at a time, multiply-rotate, final mix). */
static uint64_t lc_hash(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)n * 0xC2B2AE3D27D4EB4FULL);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = lc_load64(p + i) * 0x87C37B91114253D5ULL;
        w = (w << 31) | (w >> 33);
        h ^= w * 0x4CF5AD432745937FULL;
        h = ((h << 27) | (h >> 37)) * 5 + 0x52DCE729;
    }
    uint64_t tail = 0;
    for (Py_ssize_t j = 0; i + j < n; j++) tail |= (uint64_t)p[i + j] << (8 * j);
    h ^= tail * 0x87C37B91114253D5ULL;
    return lc_fmix64(h);
}

/* The slot of (p, n, h): a match, or the empty slot where it would go. */
static inline LCSlot *lc_find(LabelCache *c, const char *p, Py_ssize_t n, uint64_t h) {
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)c->mask);
    for (;;) {
        LCSlot *s = &c->slots[i];
        if (!s->key) return s;
        if (s->hash == h && PyBytes_GET_SIZE(s->key) == n &&
            memcmp(PyBytes_AS_STRING(s->key), p, (size_t)n) == 0)
            return s;
        i = (i + 1) & c->mask;
    }
}

/* The value for the labels p[0:n] (borrowed), or NULL; *key_out: the stored key (borrowed). */
static inline PyObject *lc_lookup(LabelCache *c, const char *p, Py_ssize_t n, uint64_t h,
                                  PyObject **key_out) {
    LCSlot *s = lc_find(c, p, n, h);
    if (!s->key) return NULL;
    if (key_out) *key_out = s->key;
    return s->value;
}

static int lc_resize(LabelCache *c, Py_ssize_t capacity) {
    LCSlot *slots = PyMem_Calloc((size_t)capacity, sizeof(LCSlot));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    LCSlot *old = c->slots;
    Py_ssize_t old_capacity = c->mask + 1;
    c->slots = slots;
    c->mask = capacity - 1;
    for (Py_ssize_t i = 0; old && i < old_capacity; i++) {
        if (!old[i].key) continue;
        Py_ssize_t j = (Py_ssize_t)(old[i].hash & (uint64_t)c->mask);
        while (slots[j].key) j = (j + 1) & c->mask;
        slots[j] = old[i];
    }
    PyMem_Free(old);
    return 0;
}

/* Set key (bytes, hash h) to value (bytes); new references are taken. */
static int lc_insert(LabelCache *c, PyObject *key, uint64_t h, PyObject *value) {
    if ((c->used + 1) * 2 > c->mask + 1 && lc_resize(c, (c->mask + 1) * 2) < 0) return -1;
    LCSlot *s = lc_find(c, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), h);
    Py_INCREF(value);
    if (s->key) {
        Py_SETREF(s->value, value);
        return 0;
    }
    Py_INCREF(key);
    s->hash = h;
    s->key = key;
    s->value = value;
    c->used++;
    return 0;
}

static void lc_clear_slots(LabelCache *c) {
    LCSlot *slots = c->slots;
    Py_ssize_t capacity = c->mask + 1;
    c->slots = NULL;
    c->used = 0;
    c->mask = -1;
    for (Py_ssize_t i = 0; slots && i < capacity; i++) {
        Py_XDECREF(slots[i].key);
        Py_XDECREF(slots[i].value);
    }
    PyMem_Free(slots);
}

/* -- the Python face ------------------------------------------------------------------------ */

static PyObject *lc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "LabelCache() takes no arguments");
        return NULL;
    }
    LabelCache *c = (LabelCache *)type->tp_alloc(type, 0);
    if (!c) return NULL;
    c->mask = -1;
    if (lc_resize(c, LC_MIN_CAPACITY) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static void lc_dealloc(LabelCache *c) {
    lc_clear_slots(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int lc_check_key(PyObject *key) {
    if (!PyBytes_CheckExact(key)) {
        PyErr_Format(PyExc_TypeError, "LabelCache keys are bytes, not %.100s",
                     Py_TYPE(key)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *lc_get_item(LabelCache *c, PyObject *key) {
    if (lc_check_key(key) < 0) return NULL;
    const char *p = PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    PyObject *v = lc_lookup(c, p, n, lc_hash((const uint8_t *)p, n), NULL);
    if (!v) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    Py_INCREF(v);
    return v;
}

static int lc_set_item(LabelCache *c, PyObject *key, PyObject *value) {
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "LabelCache does not delete single keys (clear() it)");
        return -1;
    }
    if (lc_check_key(key) < 0) return -1;
    if (!PyBytes_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "LabelCache values are bytes");
        return -1;
    }
    return lc_insert(c, key,
                     lc_hash((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)), value);
}

static Py_ssize_t lc_len(LabelCache *c) { return c->used; }

static int lc_contains(LabelCache *c, PyObject *key) {
    if (!PyBytes_CheckExact(key)) return 0;
    const char *p = PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    return lc_lookup(c, p, n, lc_hash((const uint8_t *)p, n), NULL) != NULL;
}

static PyObject *lc_get(LabelCache *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    PyObject *dflt = nargs == 2 ? args[1] : Py_None;
    if (!PyBytes_CheckExact(args[0])) {
        Py_INCREF(dflt);
        return dflt;
    }
    const char *p = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    PyObject *v = lc_lookup(c, p, n, lc_hash((const uint8_t *)p, n), NULL);
    if (!v) v = dflt;
    Py_INCREF(v);
    return v;
}

static PyObject *lc_clear(LabelCache *c, PyObject *unused) {
    (void)unused;
    lc_clear_slots(c);
    if (lc_resize(c, LC_MIN_CAPACITY) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *lc_items(LabelCache *c, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i <= c->mask; i++) {
        LCSlot *s = &c->slots[i];
        if (!s->key) continue;
        PyObject *pair = PyTuple_Pack(2, s->key, s->value);
        if (!pair || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

static PyMappingMethods lc_as_mapping = {
    (lenfunc)lc_len, (binaryfunc)lc_get_item, (objobjargproc)lc_set_item,
};

static PySequenceMethods lc_as_sequence = {
    .sq_contains = (objobjproc)lc_contains,
};

static PyMethodDef lc_methods[] = {
    {"get", (PyCFunction)(void (*)(void))lc_get, METH_FASTCALL, "get(key, default=None)"},
    {"clear", (PyCFunction)lc_clear, METH_NOARGS, "Forget every entry."},
    {"items", (PyCFunction)lc_items, METH_NOARGS, "A list of (key, value) pairs."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LabelCacheType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rwrouter.wire._scan.LabelCache",
    .tp_basicsize = sizeof(LabelCache),
    .tp_dealloc = (destructor)lc_dealloc,
    .tp_as_mapping = &lc_as_mapping,
    .tp_as_sequence = &lc_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A generation of the routing cache: raw label bytes -> compact outcome (bytes).",
    .tp_methods = lc_methods,
    .tp_new = lc_new,
};
