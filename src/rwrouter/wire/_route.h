/*
 * route_labels: the routing miss path in one call (included by _scan.c after _relabel.h; part
 * of the compiled accelerator). Compiled rwrouter.routing.router.Router._route_raw for a router
 * whose destinations all keep UTF-8 names (no escaping, so no collision memory): the same
 * cache entry (rwrouter.routing.cache.pack_entry), the same exceptions.
 *
 * route_labels(raw, global_program, routes, drop) -> bytes
 *   raw: a label set's raw Label fields (the cache key);
 *   global_program: the global rules compiled by rwrouter.relabel.engine.program (() when none);
 *   routes: per destination in route order, (program, fallback: bool, shadow: bool);
 *   drop: a label name removed after each destination's rules, or None.
 *
 * The routing rules (rwrouter.routing.router.Router._results): the global rules first (a
 * series they drop, or leave without labels, is dropped as "relabel" everywhere); then each
 * destination's rules on its own copy; a fallback destination takes the series only when no
 * destination other than a shadow kept it. Each destination's output (sorted by name) is
 * judged as rwrouter.routing.outcome.finish judges it: nothing left is "relabel", no
 * __name__ or an empty name is "invalid". Relabel semantics: Prometheus's, as _relabel.h.
 */

enum { RT_NOT_SENT = 0, RT_KEPT_SAME = 1, RT_KEPT = 2, RT_DROPPED = 3 }; /* cache.py's kinds */
enum { RT_RELABEL = 0, RT_INVALID = 1 }; /* indexes in rwrouter.routing.outcome.REASONS */

typedef struct {
    int kind;        /* RT_* */
    int reason;      /* RT_DROPPED: the reason index */
    PyObject *out;   /* RT_KEPT: the encoded output labels (owned) */
    uint32_t hash;   /* kept: the shard hash */
} RTSlot;

static PyObject *rt_name; /* "__name__" (made by PyInit__scan) */

/* Recently decoded label names and values, by their UTF-8 bytes: direct-mapped tables of
 * ASCII str (one owned reference a slot), so the names and values a fleet repeats are not
 * decoded and hashed again for each new series. Bounded: RT_NAMES + RT_VALUES slots of at
 * most RT_CACHED_LEN bytes each; a hostile sender only evicts. */
enum { RT_NAMES = 256, RT_VALUES = 4096, RT_CACHED_LEN = 64, RT_SPANS = 64 };
static PyObject *rt_names[RT_NAMES], *rt_values[RT_VALUES];

static void rt_clear_caches(void) {
    for (int i = 0; i < RT_NAMES; i++) Py_CLEAR(rt_names[i]);
    for (int i = 0; i < RT_VALUES; i++) Py_CLEAR(rt_values[i]);
}

/* Label names are interned (rl_eq then compares two interned ones by identity) only where an
 * interned str is freed once unused: CPython 3.11. Some 3.12 releases keep every interned str
 * for good, and a sender can send any number of names. */
#if PY_VERSION_HEX < 0x030C0000
#define RT_INTERN_NAMES 1
#else
#define RT_INTERN_NAMES 0
#endif

/* The str of ASCII bytes ``p[0:n]`` (a new reference, or NULL with an exception set), from
 * ``table`` of ``slots`` (a power of 2) when it is there, else made (and interned when
 * ``intern`` and RT_INTERN_NAMES) and remembered. */
static PyObject *rt_ascii(const char *p, Py_ssize_t n, PyObject **table, uint32_t slots,
                          int intern) {
    intern = intern && RT_INTERN_NAMES;
    if (n > RT_CACHED_LEN) {
        PyObject *long_str = PyUnicode_DecodeASCII(p, n, "strict");
        if (long_str && intern) PyUnicode_InternInPlace(&long_str);
        return long_str;
    }
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15u, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { /* 8 bytes a step, multiply-xorshift */
        h = (h ^ load64(p + i)) * 0xFF51AFD7ED558CCDu;
        h ^= h >> 29;
    }
    if (i < n) /* the tail: the last 8 bytes (overlapping), or the few there are */
        w = n >= 8 ? load64(p + n - 8) : load_short(p, n);
    else
        w = 0;
    h = (h ^ w) * 0xC4CEB9FE1A85EC53u;
    h ^= h >> 32;
    PyObject **slot = &table[h & (slots - 1)];
    PyObject *s = *slot;
    if (s && PyUnicode_GET_LENGTH(s) == n && bytes_eq(PyUnicode_DATA(s), p, n))
        return Py_NewRef(s);
    s = PyUnicode_New(n, 127);
    if (!s) return NULL;
    memcpy(PyUnicode_DATA(s), p, (size_t)n);
    if (intern) PyUnicode_InternInPlace(&s);
    Py_XSETREF(*slot, Py_NewRef(s));
    return s;
}

typedef struct {
    const char *name, *value;
    Py_ssize_t name_len, value_len;
} RTSpan;

static int rt_ascii_only(const char *p, Py_ssize_t n) {
    if (n < 8) return (load_short(p, n) & 0x8080808080808080u) == 0;
    uint64_t acc = load64(p + n - 8); /* the last 8 bytes (overlapping) */
    for (Py_ssize_t i = 0; i + 8 < n; i += 8) acc |= load64(p + i);
    return (acc & 0x8080808080808080u) == 0;
}

/* decode_labels straight into the empty set ``s`` (sorted by name, empty values absent) for
 * the common shape: at most RT_SPANS Label fields of ASCII names and values, each name and
 * value once. 1 done; 0 when the input is anything else (the caller asks the reference, which
 * also raises what is wrong); -1 with an exception set. */
static int rt_decode(RLSet *s, PyObject *raw) {
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(raw);
    Py_ssize_t end = PyBytes_GET_SIZE(raw), pos = 0, n = 0;
    RTSpan spans[RT_SPANS];
    while (pos < end) {
        uint64_t tag, len;
        if (n == RT_SPANS || !read_varint(d, &pos, end, &tag) || tag != 0x0A) return 0;
        if (!read_varint(d, &pos, end, &len) || len > (uint64_t)(end - pos)) return 0;
        Py_ssize_t lend = pos + (Py_ssize_t)len;
        RTSpan sp = {NULL, NULL, 0, 0};
        while (pos < lend) { /* only fields 1 and 2, length-delimited, once each */
            uint64_t t, k;
            if (!read_varint(d, &pos, lend, &t) || (t != 0x0A && t != 0x12)) return 0;
            if (!read_varint(d, &pos, lend, &k) || k > (uint64_t)(lend - pos)) return 0;
            const char **at = t == 0x0A ? &sp.name : &sp.value;
            if (*at) return 0;
            *at = (const char *)d + pos;
            *(t == 0x0A ? &sp.name_len : &sp.value_len) = (Py_ssize_t)k;
            pos += (Py_ssize_t)k;
        }
        if (!sp.name || sp.name_len == 0 || !rt_ascii_only(sp.name, sp.name_len) ||
            !rt_ascii_only(sp.value, sp.value_len))
            return 0;
        /* insertion by name bytes (ASCII: str order); a repeated name is the reference's */
        Py_ssize_t j = n++;
        while (j > 0) {
            const RTSpan *q = &spans[j - 1];
            Py_ssize_t m = q->name_len < sp.name_len ? q->name_len : sp.name_len;
            int c = bytes_cmp(q->name, sp.name, m);
            if (c == 0 && q->name_len == sp.name_len) return 0;
            if (c < 0 || (c == 0 && q->name_len < sp.name_len)) break;
            spans[j] = spans[j - 1];
            j--;
        }
        spans[j] = sp;
    }
    if (rl_reserve(s, n + 8) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (spans[i].value_len == 0) continue; /* empty = absent */
        PyObject *name = rt_ascii(spans[i].name, spans[i].name_len, rt_names, RT_NAMES, 1);
        PyObject *value =
            name ? rt_ascii(spans[i].value, spans[i].value_len, rt_values, RT_VALUES, 0) : NULL;
        if (!value) {
            Py_XDECREF(name);
            rl_clear(s);
            return -1;
        }
        s->items[s->n++] = (RLPair){name, value, 0};
    }
    return 1;
}

/* A copy of ``src`` with every label a base label (LabelBuilder.of of process's result):
 * 0, or -1 with an exception set. */
static int rt_copy(RLSet *dst, const RLSet *src) {
    if (rl_reserve(dst, src->n + 8) < 0) return -1;
    for (Py_ssize_t i = 0; i < src->n; i++) {
        Py_INCREF(src->items[i].name);
        Py_INCREF(src->items[i].value);
        dst->items[i] = (RLPair){src->items[i].name, src->items[i].value, 0};
    }
    dst->n = src->n;
    return 0;
}

/* PyUnicode_AsUTF8AndSize, without the call for an ASCII str (its data is its UTF-8). */
static inline const char *rt_utf8(PyObject *s, Py_ssize_t *n) {
    if (PyUnicode_IS_COMPACT_ASCII(s)) {
        *n = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    return PyUnicode_AsUTF8AndSize(s, n);
}

/* One destination's output, judged and encoded (outcome.finish after RuleCopies._output): the
 * set is sorted in place and ``drop`` removed. 0 and *slot, or -1 with an exception set. */
static int rt_finish(RLSet *s, PyObject *drop, PyObject *raw, RTSlot *slot) {
    rl_sort_set(s);
    if (drop != Py_None) {
        Py_ssize_t i = rl_find(s, drop);
        if (i >= 0) rl_remove(s, i);
    }
    slot->kind = RT_DROPPED;
    slot->reason = RT_RELABEL;
    if (s->n == 0) return 0;
    int named = 0;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        PyObject *name = s->items[i].name;
        if (PyUnicode_GET_LENGTH(name) == 0) {
            slot->reason = RT_INVALID;
            return 0;
        }
        if (rl_eq(name, rt_name)) named = 1;
        Py_ssize_t nn, vn;
        if (!rt_utf8(name, &nn) || !rt_utf8(s->items[i].value, &vn)) return -1;
        total += label_field_size(nn, vn);
    }
    if (!named) {
        slot->reason = RT_INVALID;
        return 0;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) return -1;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < s->n; i++) {
        Py_ssize_t nn, vn;
        const char *np = rt_utf8(s->items[i].name, &nn);
        const char *vp = rt_utf8(s->items[i].value, &vn);
        p = put_label_field(p, np, nn, vp, vn);
    }
    const char *kp = PyBytes_AS_STRING(raw);
    Py_ssize_t kn = PyBytes_GET_SIZE(raw);
    if (total == kn && memcmp(PyBytes_AS_STRING(out), kp, (size_t)kn) == 0) {
        Py_DECREF(out);
        slot->kind = RT_KEPT_SAME;
        return shard_hash(kp, kn, &slot->hash);
    }
    slot->kind = RT_KEPT;
    slot->out = out;
    return shard_hash(PyBytes_AS_STRING(out), total, &slot->hash);
}

/* One destination's rules on a copy of ``base``, then rt_finish. 0, or -1 with an exception
 * set. */
static int rt_destination(const RLSet *base, PyObject *program, PyObject *drop, PyObject *raw,
                          RTSlot *slot) {
    RLSet w = {NULL, 0, 0};
    if (rt_copy(&w, base) < 0) return -1;
    int kept = rl_run(&w, program);
    int rc = 0;
    if (kept < 0) {
        rc = -1;
    } else if (!kept || w.n == 0) { /* process's None or (): "relabel" */
        slot->kind = RT_DROPPED;
        slot->reason = RT_RELABEL;
    } else {
        rc = rt_finish(&w, drop, raw, slot);
    }
    rl_clear(&w);
    return rc;
}

/* The cache entry of the slots (cache.pack_entry), a new bytes object or NULL. */
static PyObject *rt_pack(const RTSlot *slots, Py_ssize_t n) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += slots[i].kind == RT_NOT_SENT   ? 1
                 : slots[i].kind == RT_DROPPED  ? 2
                 : slots[i].kind == RT_KEPT_SAME ? 5
                                                 : 9 + PyBytes_GET_SIZE(slots[i].out);
    PyObject *entry = PyBytes_FromStringAndSize(NULL, total);
    if (!entry) return NULL;
    char *p = PyBytes_AS_STRING(entry);
    for (Py_ssize_t i = 0; i < n; i++) {
        *p++ = (char)slots[i].kind;
        if (slots[i].kind == RT_DROPPED) {
            *p++ = (char)slots[i].reason;
        } else if (slots[i].kind == RT_KEPT_SAME) {
            p = put_u32(p, slots[i].hash);
        } else if (slots[i].kind == RT_KEPT) {
            Py_ssize_t len = PyBytes_GET_SIZE(slots[i].out);
            p = put_u32(p, slots[i].hash);
            p = put_u32(p, (uint32_t)len);
            memcpy(p, PyBytes_AS_STRING(slots[i].out), (size_t)len);
            p += len;
        }
    }
    return entry;
}

/* route_labels(raw, global_program, routes, drop): see the file comment. */
static PyObject *route_labels(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyBytes_CheckExact(args[0]) || !PyTuple_Check(args[1]) ||
        !PyTuple_Check(args[2]) || (args[3] != Py_None && !PyUnicode_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError,
                        "route_labels(raw: bytes, global_program: tuple, routes: tuple, drop)");
        return NULL;
    }
    PyObject *raw = args[0], *global = args[1], *routes = args[2], *drop = args[3];
    Py_ssize_t n = PyTuple_GET_SIZE(routes);
    if (n > MAX_DESTINATIONS) {
        PyErr_SetString(PyExc_ValueError, "route_labels: too many destinations");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *route = PyTuple_GET_ITEM(routes, i);
        if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != 3 ||
            !PyTuple_Check(PyTuple_GET_ITEM(route, 0))) {
            PyErr_SetString(PyExc_TypeError, "a route is (program: tuple, fallback, shadow)");
            return NULL;
        }
    }
    RLSet base = {NULL, 0, 0};
    int decoded = rt_decode(&base, raw);
    if (decoded < 0) return NULL;
    if (!decoded) {
        PyObject *labels = decode_labels(module, raw); /* DecodeError as the reference raises */
        if (!labels) return NULL;
        int loaded = PyTuple_Check(labels) ? rl_load(&base, labels) : -1;
        if (loaded < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "decode_labels gave no tuple");
        Py_DECREF(labels);
        if (loaded < 0) return NULL;
    }
    RTSlot slots[MAX_DESTINATIONS];
    memset(slots, 0, sizeof(RTSlot) * (size_t)(n ? n : 1));
    PyObject *entry = NULL;
    int kept = PyTuple_GET_SIZE(global) ? rl_run(&base, global) : 1;
    if (kept < 0) goto done;
    if (!kept || base.n == 0) { /* dropped by the global rules: "relabel" everywhere */
        for (Py_ssize_t i = 0; i < n; i++) slots[i] = (RTSlot){RT_DROPPED, RT_RELABEL, NULL, 0};
        entry = rt_pack(slots, n);
        goto done;
    }
    /* process's result is sorted (rt_copy makes every label a base label) */
    rl_sort_set(&base);
    int kept_by_primary = 0, fallback[MAX_DESTINATIONS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *route = PyTuple_GET_ITEM(routes, i);
        int shadow = PyObject_IsTrue(PyTuple_GET_ITEM(route, 2));
        if ((fallback[i] = PyObject_IsTrue(PyTuple_GET_ITEM(route, 1))) < 0 || shadow < 0)
            goto done;
        if (fallback[i]) {
            slots[i].kind = RT_NOT_SENT;
            continue;
        }
        if (rt_destination(&base, PyTuple_GET_ITEM(route, 0), drop, raw, &slots[i]) < 0) goto done;
        if (slots[i].kind != RT_DROPPED && !shadow) kept_by_primary = 1;
    }
    for (Py_ssize_t i = 0; i < n && !kept_by_primary; i++)
        if (fallback[i] &&
            rt_destination(&base, PyTuple_GET_ITEM(PyTuple_GET_ITEM(routes, i), 0), drop, raw,
                           &slots[i]) < 0)
            goto done;
    entry = rt_pack(slots, n);
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(slots[i].out);
    rl_clear(&base);
    return entry;
}
