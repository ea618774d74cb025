/*
 * relabel_program: the relabel engine's per-rule loop (included by _scan.c; part of the
 * compiled accelerator). Compiled rwrouter.relabel.engine.process_program_py: same arguments,
 * same result, same exceptions; the rules come compiled by rwrouter.relabel.engine.program.
 *
 * Prometheus relabel semantics (model/relabel/relabel.go, labels.Builder) as the pure engine
 * applies them: the working label set is an array in Builder.Range order (the base labels no
 * rule set or deleted, in name order, then the labels rules set in the order first set; a set
 * of a name already set changes its value in place, a set of a base name moves it to the
 * end, "" deletes). Every regex and template stays in Python: each rule carries its memo (a
 * dict of the outcomes by source value or label name, which the pure engine fills too) and a
 * fallback that computes an outcome and remembers it. So a rule costs a dict lookup here
 * when its value was seen before, and what the regexes answer is the pure engine's by
 * construction.
 *
 * One compiled rule: a tuple (code, sources, separator, target, memo, fallback, fast, fixed,
 * copy, names):
 * code (RL_*), sources (tuple of str), separator (str), target (str), memo (dict or None),
 * fallback (callable of one str, or None), fast (bool: replace's fixed-pair path applies to
 * an empty value), fixed (str: that path's replacement), copy (bool: a replace whose outcome
 * is (target, the source value) for any value: RelabelConfig.copies_source), names (labeldrop
 * and labelkeep: the tuple of names the regex matches when it is an alternation of plain names,
 * engine.literal_names, else None: then the set's names are looked for, not each name's memo).
 */

static PyObject *rl_empty; /* "" (made by PyInit__scan) */

enum {
    RL_REPLACE = 0,
    RL_KEEP = 1,
    RL_DROP = 2,
    RL_KEEPEQUAL = 3,
    RL_DROPEQUAL = 4,
    RL_HASHMOD = 5,
    RL_LABELMAP = 6,
    RL_LABELDROP = 7,
    RL_LABELKEEP = 8,
    RL_LOWERCASE = 9,
    RL_UPPERCASE = 10,
};

typedef struct {
    PyObject *name;  /* str, owned */
    PyObject *value; /* str, owned */
    int added;       /* set by a rule (Builder's add list) */
} RLPair;

typedef struct {
    RLPair *items;
    Py_ssize_t n, cap;
} RLSet;

static void rl_clear(RLSet *s) {
    for (Py_ssize_t i = 0; i < s->n; i++) {
        Py_DECREF(s->items[i].name);
        Py_DECREF(s->items[i].value);
    }
    PyMem_Free(s->items);
    s->items = NULL;
    s->n = s->cap = 0;
}

static int rl_reserve(RLSet *s, Py_ssize_t n) {
    if (n <= s->cap) return 0;
    Py_ssize_t cap = s->cap ? s->cap * 2 : 32;
    while (cap < n) cap *= 2;
    RLPair *p = PyMem_Realloc(s->items, sizeof(RLPair) * (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    s->items = p;
    s->cap = cap;
    return 0;
}

/* Whether two str are equal: two interned ones only when they are the same object (the label
 * names of the miss path are: rt_ascii and engine.program intern them). */
static inline int rl_eq(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyUnicode_CHECK_INTERNED(a) && PyUnicode_CHECK_INTERNED(b)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(b)) return 0;
    if (PyUnicode_IS_COMPACT_ASCII(a) && PyUnicode_IS_COMPACT_ASCII(b))
        return bytes_eq(PyUnicode_DATA(a), PyUnicode_DATA(b), n);
    return PyUnicode_Compare(a, b) == 0;
}

static Py_ssize_t rl_find(const RLSet *s, PyObject *name) {
    for (Py_ssize_t i = 0; i < s->n; i++)
        if (rl_eq(s->items[i].name, name)) return i;
    return -1;
}

static void rl_remove(RLSet *s, Py_ssize_t i) {
    Py_DECREF(s->items[i].name);
    Py_DECREF(s->items[i].value);
    memmove(&s->items[i], &s->items[i + 1], sizeof(RLPair) * (size_t)(s->n - i - 1));
    s->n--;
}

/* Builder.Set (LabelBuilder.set): "" deletes. 0, or -1 with an exception set. */
static int rl_set(RLSet *s, PyObject *name, PyObject *value) {
    Py_ssize_t i = rl_find(s, name);
    if (PyUnicode_GET_LENGTH(value) == 0) {
        if (i >= 0) rl_remove(s, i);
        return 0;
    }
    if (i >= 0 && s->items[i].added) {
        Py_INCREF(value);
        Py_SETREF(s->items[i].value, value);
        return 0;
    }
    if (i >= 0) rl_remove(s, i); /* a base label moves to the end */
    if (rl_reserve(s, s->n + 1) < 0) return -1;
    Py_INCREF(name);
    Py_INCREF(value);
    s->items[s->n++] = (RLPair){name, value, 1};
    return 0;
}

/* The value of ``name`` (a new reference; "" when absent). */
static PyObject *rl_get(const RLSet *s, PyObject *name, PyObject *empty) {
    Py_ssize_t i = rl_find(s, name);
    PyObject *v = i >= 0 ? s->items[i].value : empty;
    Py_INCREF(v);
    return v;
}

/* The rule's source value: the sources' values joined by the separator (new reference). */
static PyObject *rl_source(const RLSet *s, PyObject *sources, PyObject *sep, PyObject *empty) {
    Py_ssize_t k = PyTuple_GET_SIZE(sources);
    if (k == 1) return rl_get(s, PyTuple_GET_ITEM(sources, 0), empty);
    if (k == 0) {
        Py_INCREF(empty);
        return empty;
    }
    PyObject *parts = PyList_New(k);
    if (!parts) return NULL;
    for (Py_ssize_t j = 0; j < k; j++) PyList_SET_ITEM(parts, j, rl_get(s, PyTuple_GET_ITEM(sources, j), empty));
    PyObject *joined = PyUnicode_Join(sep, parts);
    Py_DECREF(parts);
    return joined;
}

/* The outcome a rule remembers for ``key``, else its fallback's (which remembers it): a new
 * reference, or NULL with an exception set. */
static PyObject *rl_outcome(PyObject *memo, PyObject *fallback, PyObject *key) {
    if (memo != Py_None) {
        PyObject *known = PyDict_GetItemWithError(memo, key);
        if (known) {
            Py_INCREF(known);
            return known;
        }
        if (PyErr_Occurred()) return NULL;
    }
    return PyObject_CallOneArg(fallback, key);
}

/* A snapshot of the names and values in Range order (labelmap, labeldrop, labelkeep walk it
 * while the set changes): an array of owned pairs (rl_free_snapshot). */
static RLPair *rl_snapshot(const RLSet *s) {
    RLPair *snap = PyMem_Malloc(sizeof(RLPair) * (size_t)(s->n ? s->n : 1));
    if (!snap) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < s->n; i++) {
        snap[i] = s->items[i];
        Py_INCREF(snap[i].name);
        Py_INCREF(snap[i].value);
    }
    return snap;
}

static void rl_free_snapshot(RLPair *snap, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(snap[i].name);
        Py_DECREF(snap[i].value);
    }
    PyMem_Free(snap);
}

/* labelmap (map: 1), labeldrop (drop: 1 when the name matches) or labelkeep (drop: 1 when it
 * does not). 0, or -1 with an exception set. */
static int rl_names(RLSet *s, int code, PyObject *memo, PyObject *fallback) {
    Py_ssize_t n = s->n;
    RLPair *snap = rl_snapshot(s);
    if (!snap) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        PyObject *out = rl_outcome(memo, fallback, snap[i].name);
        if (!out) {
            rc = -1;
            break;
        }
        if (code == RL_LABELMAP) {
            if (out != Py_None) rc = rl_set(s, out, snap[i].value);
        } else {
            int matches = PyObject_IsTrue(out);
            if (matches < 0) rc = -1;
            else if (matches == (code == RL_LABELDROP)) rc = rl_set(s, snap[i].name, rl_empty);
        }
        Py_DECREF(out);
    }
    rl_free_snapshot(snap, n);
    return rc;
}

/* labeldrop (drop the labels named in ``names``) or labelkeep (drop the others) of a regex
 * that matches exactly ``names`` (a tuple of str): what rl_names does, without a lookup per
 * label. Removing keeps the order of the rest. 0, or -1 with an exception set. */
static int rl_literal_names(RLSet *s, int code, PyObject *names) {
    if (!PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "a rule's names are a tuple of str");
        return -1;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    for (Py_ssize_t j = 0; j < k; j++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, j))) {
            PyErr_SetString(PyExc_TypeError, "a rule's names are a tuple of str");
            return -1;
        }
    if (code == RL_LABELDROP) {
        for (Py_ssize_t j = 0; j < k; j++) {
            Py_ssize_t i = rl_find(s, PyTuple_GET_ITEM(names, j));
            if (i >= 0) rl_remove(s, i);
        }
        return 0;
    }
    for (Py_ssize_t i = s->n - 1; i >= 0; i--) {
        int named = 0;
        for (Py_ssize_t j = 0; j < k && !named; j++) named = rl_eq(s->items[i].name, PyTuple_GET_ITEM(names, j));
        if (!named) rl_remove(s, i);
    }
    return 0;
}

/* One rule: 1 kept, 0 dropped, -1 with an exception set. */
static int rl_apply(RLSet *s, PyObject *rule, PyObject *empty) {
    if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != 10) {
        PyErr_SetString(PyExc_TypeError, "a compiled rule is a tuple of 10");
        return -1;
    }
    int code = (int)PyLong_AsLong(PyTuple_GET_ITEM(rule, 0));
    PyObject *sources = PyTuple_GET_ITEM(rule, 1), *sep = PyTuple_GET_ITEM(rule, 2);
    PyObject *target = PyTuple_GET_ITEM(rule, 3), *memo = PyTuple_GET_ITEM(rule, 4);
    PyObject *fallback = PyTuple_GET_ITEM(rule, 5);
    PyObject *names = PyTuple_GET_ITEM(rule, 9);
    if ((code == RL_LABELDROP || code == RL_LABELKEEP) && names != Py_None)
        return rl_literal_names(s, code, names) < 0 ? -1 : 1;
    if (code == RL_LABELMAP || code == RL_LABELDROP || code == RL_LABELKEEP)
        return rl_names(s, code, memo, fallback) < 0 ? -1 : 1;
    PyObject *value = rl_source(s, sources, sep, empty);
    if (!value) return -1;
    int rc = 1;
    if (code == RL_KEEPEQUAL || code == RL_DROPEQUAL) {
        PyObject *other = rl_get(s, target, empty);
        int same = rl_eq(other, value);
        Py_DECREF(other);
        rc = same == (code == RL_KEEPEQUAL);
    } else if (code == RL_REPLACE && PyUnicode_GET_LENGTH(value) == 0 &&
               PyTuple_GET_ITEM(rule, 6) == Py_True) {
        rc = rl_set(s, target, PyTuple_GET_ITEM(rule, 7)) < 0 ? -1 : 1;
    } else if (code == RL_REPLACE && PyTuple_GET_ITEM(rule, 8) == Py_True) {
        rc = rl_set(s, target, value) < 0 ? -1 : 1;
    } else {
        PyObject *out = rl_outcome(memo, fallback, value);
        if (!out) {
            rc = -1;
        } else if (code == RL_KEEP || code == RL_DROP) {
            int matches = PyObject_IsTrue(out);
            rc = matches < 0 ? -1 : matches == (code == RL_KEEP);
        } else if (code == RL_REPLACE) {
            if (out != Py_None) {
                if (!PyTuple_Check(out) || PyTuple_GET_SIZE(out) != 2) {
                    PyErr_SetString(PyExc_TypeError, "a replace outcome is (target, value)");
                    rc = -1;
                } else {
                    rc = rl_set(s, PyTuple_GET_ITEM(out, 0), PyTuple_GET_ITEM(out, 1)) < 0 ? -1 : 1;
                }
            }
        } else { /* hashmod, lowercase, uppercase: the target gets the outcome */
            rc = rl_set(s, target, out) < 0 ? -1 : 1;
        }
        Py_XDECREF(out);
    }
    Py_DECREF(value);
    return rc;
}

/* str order (code points) of two str: memcmp when both are ASCII (the common case), else
 * PyUnicode_Compare (no error for two str). */
static inline int rl_cmp_str(PyObject *a, PyObject *b) {
    if (a == b) return 0;
    if (PyUnicode_IS_COMPACT_ASCII(a) && PyUnicode_IS_COMPACT_ASCII(b)) {
        Py_ssize_t na = PyUnicode_GET_LENGTH(a), nb = PyUnicode_GET_LENGTH(b);
        int c = bytes_cmp(PyUnicode_DATA(a), PyUnicode_DATA(b), na < nb ? na : nb);
        return c ? c : (na > nb) - (na < nb);
    }
    return PyUnicode_Compare(a, b);
}

static inline int rl_cmp_pairs(const RLPair *x, const RLPair *y) {
    int c = rl_cmp_str(x->name, y->name);
    return c ? c : rl_cmp_str(x->value, y->value);
}

static int rl_qsort_cmp(const void *a, const void *b) { return rl_cmp_pairs(a, b); }

/* Past this many labels (or labels set by rules, for rl_sort_set) the sorts below take qsort:
 * an insertion's quadratic worst case stays off a hostile label set. */
#define RL_INSERTION_MAX 32

/* Sort by (name, value): an insertion sort for a small set, qsort for a larger one. */
static void rl_sort(RLSet *s) {
    if (s->n > RL_INSERTION_MAX) {
        qsort(s->items, (size_t)s->n, sizeof(RLPair), rl_qsort_cmp);
        return;
    }
    for (Py_ssize_t i = 1; i < s->n; i++) {
        RLPair x = s->items[i];
        Py_ssize_t j = i;
        while (j > 0 && rl_cmp_pairs(&s->items[j - 1], &x) > 0) {
            s->items[j] = s->items[j - 1];
            j--;
        }
        s->items[j] = x;
    }
}

/* Sort a working set by name, knowing its shape (rl_set keeps it): the base labels, sorted,
 * then the labels rules set; names are distinct. Each set label is put in place by binary
 * search, so the base labels are not compared again. */
static void rl_sort_set(RLSet *s) {
    Py_ssize_t k = 0;
    while (k < s->n && !s->items[k].added) k++;
    if (s->n - k > RL_INSERTION_MAX) { /* e.g. a labelmap that set every label again */
        qsort(s->items, (size_t)s->n, sizeof(RLPair), rl_qsort_cmp);
        return;
    }
    for (Py_ssize_t i = k; i < s->n; i++) {
        RLPair x = s->items[i];
        Py_ssize_t lo = 0, hi = i;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (rl_cmp_str(s->items[mid].name, x.name) < 0) lo = mid + 1;
            else hi = mid;
        }
        memmove(&s->items[lo + 1], &s->items[lo], sizeof(RLPair) * (size_t)(i - lo));
        s->items[lo] = x;
    }
}

/* Fill the empty set ``s`` from ``labels`` ((name, value) tuples of str) as LabelBuilder.of
 * does: sorted by name, a repeated name keeps its last value. 0, or -1 with an exception set
 * (``s`` cleared). */
static int rl_load(RLSet *s, PyObject *labels) {
    Py_ssize_t n = PyTuple_GET_SIZE(labels);
    if (rl_reserve(s, n + 8) < 0) return -1;
    int sorted = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(labels, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            rl_clear(s);
            PyErr_SetString(PyExc_TypeError, "labels are (name: str, value: str) tuples");
            return -1;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        Py_INCREF(name);
        Py_INCREF(value);
        s->items[s->n++] = (RLPair){name, value, 0};
        if (i && rl_cmp_str(s->items[i - 1].name, name) >= 0) sorted = 0;
    }
    if (!sorted) {
        rl_sort(s);
        Py_ssize_t w = 0;
        for (Py_ssize_t i = 0; i < s->n; i++) {
            if (w && rl_eq(s->items[w - 1].name, s->items[i].name)) {
                Py_DECREF(s->items[w - 1].name);
                Py_DECREF(s->items[w - 1].value);
                s->items[w - 1] = s->items[i];
            } else {
                s->items[w++] = s->items[i];
            }
        }
        s->n = w;
    }
    return 0;
}

/* Apply the compiled rules in order: 1 kept, 0 dropped by a rule, -1 with an exception set. */
static int rl_run(RLSet *s, PyObject *program) {
    Py_ssize_t rules = PyTuple_GET_SIZE(program);
    for (Py_ssize_t r = 0; r < rules; r++) {
        int kept = rl_apply(s, PyTuple_GET_ITEM(program, r), rl_empty);
        if (kept <= 0) return kept;
    }
    return 1;
}

/* The set as process returns it: (name, value) tuples sorted by name (a new tuple), or NULL
 * with an exception set. The set is sorted in place. */
static PyObject *rl_tuple(RLSet *s) {
    rl_sort_set(s);
    PyObject *out = PyTuple_New(s->n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        PyObject *pair = PyTuple_Pack(2, s->items[i].name, s->items[i].value);
        if (!pair) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

/* relabel_program(labels, program): see the file comment. None when a rule dropped the
 * series, else the label set as (name, value) tuples sorted by name. */
static PyObject *relabel_program(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "relabel_program(labels: tuple, program: tuple)");
        return NULL;
    }
    RLSet s = {NULL, 0, 0};
    if (rl_load(&s, args[0]) < 0) return NULL;
    int kept = rl_run(&s, args[1]);
    PyObject *out = kept < 0 ? NULL : kept ? rl_tuple(&s) : Py_NewRef(Py_None);
    rl_clear(&s);
    return out;
}
