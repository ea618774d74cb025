/*
 * LabelCache: a generation of the routing cache as an open-addressing hash table keyed by a
 * 128-bit digest of the raw label bytes (included by _scan.c; part of the compiled
 * accelerator).
 *
 * Why not a dict: a dict keeps every key (a bytes copy of the labels, ~280 bytes a series) and
 * needs a key object and a SipHash per lookup. Here a lookup hashes the labels where they are
 * in the request (no copy, no allocation) with two independent 64-bit lanes seeded at random
 * per process, and a slot holds only the digest and the outcome: an outcome of up to 8 bytes
 * (two destinations, neither changing the labels: the usual case) in the slot itself, a longer
 * one as a bytes object. Two label sets are taken as the same when the digests' 124 bits agree
 * (4 bits of the second lane say how the slot holds its value): with a million cached sets the
 * chance that any two collide is about 1e-25.
 *
 * The digest is xxHash's XXH3-128 when the build found xxhash.h 0.8.1 or later (Debian
 * libxxhash-dev, used header-only), else a MurmurHash3-style one of its own. Neither is a
 * keyed cryptographic hash: the seed is random per process and never shown, and the 1e-25
 * above is for label sets that are not chosen to collide (xxHash's maintainers report input
 * pairs of 32-240 bytes that collide with about 2^-27 chance over random seeds). A
 * collision gives one label set the other's routing outcome, in this process only.
 *
 * To Python it is a small mapping of bytes keys to bytes values (get, [], []=, in, len, clear,
 * items: the keys it gives back are the 16-byte digests): the pure-Python loop and the Router
 * use it like a dict.
 */

typedef struct {
    uint64_t h1, h2; /* the digest; h2's low 4 bits (0 in a Digest): LC_OBJECT or the length */
    union {
        PyObject *obj;    /* LC_OBJECT: bytes, or NULL for an empty slot */
        uint8_t bytes[8]; /* 1-8 (the length): the value itself */
    } v;
} LCSlot;

#define LC_LENGTH_BITS 0xFULL
#define LC_OBJECT 0
#define LC_INLINE_MAX 8

/* How many value bytes the slot holds itself (0: the value is v.obj). */
static inline Py_ssize_t lc_inline_len(const LCSlot *s) { return (Py_ssize_t)(s->h2 & LC_LENGTH_BITS); }

static inline int lc_used(const LCSlot *s) { return lc_inline_len(s) || s->v.obj; }

typedef struct {
    PyObject_HEAD
    LCSlot *slots;
    Py_ssize_t mask; /* capacity - 1 (capacity a power of two) */
    Py_ssize_t used;
} LabelCache;

typedef struct {
    uint64_t h1, h2;
} Digest;

static PyTypeObject LabelCacheType;
static uint64_t lc_seed1 = 0x9E3779B97F4A7C15ULL, lc_seed2 = 0xD6E8FEB86659FD93ULL;

#define LC_MIN_CAPACITY 1024
#define LC_MAX_EXPECTED ((Py_ssize_t)1 << 28)

static inline uint64_t lc_load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t lc_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t lc_fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

#if defined(RWROUTER_XXH3) /* setup.py defines it when xxhash.h is there (libxxhash-dev) */
#define XXH_INLINE_ALL
#include <xxhash.h>
#if XXH_VERSION_NUMBER < 801 /* XXH3_128bits_withSecretandSeed came with 0.8.1 */
#undef RWROUTER_XXH3
#endif
#endif

#if defined(RWROUTER_XXH3)

/* XXH3's secret for inputs over 240 bytes, made from the process's seed once (lc_set_seed):
 * XXH3_128bits_withSeed would derive it again for every such label set. */
static XXH_ALIGN(64) unsigned char lc_secret[XXH3_SECRET_DEFAULT_SIZE];

/* The 128-bit hash of a byte string: xxHash's XXH3-128, seeded per process (about a third of
 * the instructions of the fallback below on a 230-byte label set). */
static Digest lc_hash128(const uint8_t *p, Py_ssize_t n) {
    XXH128_hash_t x =
        XXH3_128bits_withSecretandSeed(p, (size_t)n, lc_secret, sizeof(lc_secret), lc_seed1);
    Digest d = {x.low64, x.high64};
    return d;
}
#else
/* The 128-bit hash of a byte string: two 64-bit lanes (MurmurHash3 x64-128 style mixing,
 * 16 bytes a round), seeded per process. */
static Digest lc_hash128(const uint8_t *p, Py_ssize_t n) {
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = lc_seed1 ^ (uint64_t)n, h2 = lc_seed2 ^ ((uint64_t)n * c1);
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t k1 = lc_load64(p + i), k2 = lc_load64(p + i + 8);
        k1 *= c1, k1 = lc_rotl(k1, 31), k1 *= c2, h1 ^= k1;
        h1 = lc_rotl(h1, 27), h1 += h2, h1 = h1 * 5 + 0x52dce729;
        k2 *= c2, k2 = lc_rotl(k2, 33), k2 *= c1, h2 ^= k2;
        h2 = lc_rotl(h2, 31), h2 += h1, h2 = h2 * 5 + 0x38495ab5;
    }
    uint64_t k1 = 0, k2 = 0;
    for (Py_ssize_t j = 0; i + j < n; j++) {
        if (j < 8)
            k1 |= (uint64_t)p[i + j] << (8 * j);
        else
            k2 |= (uint64_t)p[i + j] << (8 * (j - 8));
    }
    k2 *= c2, k2 = lc_rotl(k2, 33), k2 *= c1, h2 ^= k2;
    k1 *= c1, k1 = lc_rotl(k1, 31), k1 *= c2, h1 ^= k1;
    h1 ^= (uint64_t)n, h2 ^= (uint64_t)n;
    h1 += h2, h2 += h1;
    h1 = lc_fmix64(h1), h2 = lc_fmix64(h2);
    h1 += h2, h2 += h1;
    Digest d = {h1, h2};
    return d;
}
#endif

/* The digest of a label set: lc_hash128 of its bytes, the low bits of the second lane cleared
 * (the slot's). */
static inline Digest lc_digest(const uint8_t *p, Py_ssize_t n) {
    Digest d = lc_hash128(p, n);
    d.h2 &= ~LC_LENGTH_BITS;
    return d;
}

/* The digest of a label set from the lc_hash128 of each of its Label fields, in order
 * (scan_rw2: an RW 2.0 series, whose fields a per-request table has hashed once each), not
 * from its bytes: lc_fold_start, lc_fold for each field, lc_folded with their count. Each
 * lane folds the fields' hashes of its own (the two 64-bit halves of lc_hash128, seeded per
 * process): the first by xor and multiply, the second by rotate and add, both order-sensitive;
 * lc_folded mixes the lanes with the count as lc_digest's fallback finalizes. For label sets
 * not chosen to collide, two agree with about the chance that lc_digest's do (the first lane
 * loses one bit between two orders of the same fields: its lowest is their parity). A label
 * set so folded does not get the digest its bytes get: the two are different key spaces (see
 * scan_rw2). */
#define LC_FOLD_1 0x9E3779B97F4A7C15ULL
#define LC_FOLD_2 0xC2B2AE3D27D4EB4FULL

static inline Digest lc_fold_start(void) {
    Digest d = {lc_seed2, lc_seed1 ^ LC_FOLD_1};
    return d;
}

static inline void lc_fold(Digest *acc, Digest field) {
    acc->h1 = (acc->h1 ^ field.h1) * LC_FOLD_1;
    acc->h2 = lc_rotl(acc->h2, 29) + field.h2;
}

static inline Digest lc_folded(Digest acc, Py_ssize_t n) {
    uint64_t h1 = acc.h1 ^ (uint64_t)n, h2 = acc.h2 ^ ((uint64_t)n * LC_FOLD_2);
    h1 += h2, h2 += h1;
    h1 = lc_fmix64(h1), h2 = lc_fmix64(h2);
    h1 += h2, h2 += h1;
    Digest d = {h1, h2 & ~LC_LENGTH_BITS};
    return d;
}

/* Seed the digest for this process (16 random bytes). */
static void lc_set_seed(const char *random16) {
    memcpy(&lc_seed1, random16, 8);
    memcpy(&lc_seed2, random16 + 8, 8);
#if defined(RWROUTER_XXH3)
    XXH3_generateSecret_fromSeed(lc_secret, lc_seed1);
#endif
}

/* The slot of a digest: a match, or the empty slot where it would go. */
static inline LCSlot *lc_find(LabelCache *c, Digest g) {
    Py_ssize_t i = (Py_ssize_t)(g.h1 & (uint64_t)c->mask);
    for (;;) {
        LCSlot *s = &c->slots[i];
        if (!lc_used(s) || (s->h1 == g.h1 && (s->h2 & ~LC_LENGTH_BITS) == g.h2)) return s;
        i = (i + 1) & c->mask;
    }
}

/* The slot holding a digest's value, or NULL. */
static inline LCSlot *lc_lookup(LabelCache *c, Digest g) {
    LCSlot *s = lc_find(c, g);
    return lc_used(s) ? s : NULL;
}

/* A slot's value as a bytes object (a new reference), or NULL with an exception set. */
static PyObject *lc_value(const LCSlot *s) {
    Py_ssize_t n = lc_inline_len(s);
    return n ? PyBytes_FromStringAndSize((const char *)s->v.bytes, n) : Py_NewRef(s->v.obj);
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
        if (!lc_used(&old[i])) continue;
        Py_ssize_t j = (Py_ssize_t)(old[i].h1 & (uint64_t)c->mask);
        while (lc_used(&slots[j])) j = (j + 1) & c->mask;
        slots[j] = old[i];
    }
    PyMem_Free(old);
    return 0;
}

/* Set a digest to the value p[0:n]; obj: a bytes object of those bytes, or NULL. A value of
 * 1-8 bytes goes in the slot, a longer (or empty) one as obj (a new reference; made when
 * NULL). 0, or -1 with an exception set. */
static int lc_insert(LabelCache *c, Digest g, const char *p, Py_ssize_t n, PyObject *obj) {
    if ((c->used + 1) * 2 > c->mask + 1 && lc_resize(c, (c->mask + 1) * 2) < 0) return -1;
    PyObject *keep = NULL;
    if (n < 1 || n > LC_INLINE_MAX) {
        keep = obj ? Py_NewRef(obj) : PyBytes_FromStringAndSize(p, n);
        if (!keep) return -1;
    }
    LCSlot *s = lc_find(c, g);
    if (!lc_used(s)) c->used++;
    else if (!lc_inline_len(s)) Py_DECREF(s->v.obj);
    s->h1 = g.h1;
    s->h2 = g.h2 | (keep ? LC_OBJECT : (uint64_t)n);
    s->v.obj = keep;
    if (!keep) memcpy(s->v.bytes, p, (size_t)n);
    return 0;
}

/* Release a slot array (NULL: none) and the values it holds. */
static void lc_free_slots(LCSlot *slots, Py_ssize_t capacity) {
    for (Py_ssize_t i = 0; slots && i < capacity; i++)
        if (!lc_inline_len(&slots[i])) Py_XDECREF(slots[i].v.obj);
    PyMem_Free(slots);
}

static inline Digest lc_digest_of(PyObject *key) {
    return lc_digest((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
}

/* -- the Python face ------------------------------------------------------------------------ */

/* LabelCache(expected=0): room for ``expected`` entries from the start (a generation taking
 * over from one that held that many), so it does not grow by doubling (each growth rehashes
 * every entry and holds both tables for a moment). */
static PyObject *lc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Py_ssize_t expected = 0;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "LabelCache() takes no keywords");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "|n:LabelCache", &expected)) return NULL;
    if (expected < 0 || expected > LC_MAX_EXPECTED) {
        PyErr_SetString(PyExc_ValueError, "LabelCache: expected entries out of range");
        return NULL;
    }
    Py_ssize_t capacity = LC_MIN_CAPACITY;
    while (capacity < 2 * expected + 2) capacity *= 2; /* at most half full, as lc_insert keeps */
    LabelCache *c = (LabelCache *)type->tp_alloc(type, 0);
    if (!c) return NULL;
    c->mask = -1;
    if (lc_resize(c, capacity) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static void lc_dealloc(LabelCache *c) {
    lc_free_slots(c->slots, c->mask + 1);
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
    LCSlot *s = lc_lookup(c, lc_digest_of(key));
    if (!s) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return lc_value(s);
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
    return lc_insert(c, lc_digest_of(key), PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), value);
}

static Py_ssize_t lc_len(LabelCache *c) { return c->used; }

static int lc_contains(LabelCache *c, PyObject *key) {
    if (!PyBytes_CheckExact(key)) return 0;
    return lc_lookup(c, lc_digest_of(key)) != NULL;
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
    LCSlot *s = lc_lookup(c, lc_digest_of(args[0]));
    return s ? lc_value(s) : Py_NewRef(dflt);
}

/* The new slot array is allocated before the old one is released: without memory for it the
 * cache stays as it was (MemoryError), never without slots. */
static PyObject *lc_clear(LabelCache *c, PyObject *unused) {
    (void)unused;
    LCSlot *fresh = PyMem_Calloc(LC_MIN_CAPACITY, sizeof(LCSlot));
    if (!fresh) return PyErr_NoMemory();
    LCSlot *old = c->slots;
    Py_ssize_t old_capacity = c->mask + 1;
    c->slots = fresh;
    c->mask = LC_MIN_CAPACITY - 1;
    c->used = 0;
    lc_free_slots(old, old_capacity);
    Py_RETURN_NONE;
}

static PyObject *lc_items(LabelCache *c, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i <= c->mask; i++) {
        LCSlot *s = &c->slots[i];
        if (!lc_used(s)) continue;
        uint64_t digest[2] = {s->h1, s->h2 & ~LC_LENGTH_BITS};
        PyObject *key = PyBytes_FromStringAndSize((const char *)digest, 16);
        PyObject *value = key ? lc_value(s) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
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
    {"items", (PyCFunction)lc_items, METH_NOARGS,
     "A list of (16-byte digest of the key, value) pairs."},
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
    .tp_doc = "A generation of the routing cache: raw label bytes (kept as a 128-bit digest) -> "
              "compact outcome (bytes).",
    .tp_methods = lc_methods,
    .tp_new = lc_new,
};
