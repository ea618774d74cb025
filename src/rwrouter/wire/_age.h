/* The sample age limit's scan (rwrouter.wire.age), included by _scan.c after _rw2out.h
 * (rw_field, read_varint):
 *
 *   sample_ages(body) -> (oldest timestamp or None, samples)
 *       compiled rwrouter.wire.age.sample_ages_py: the oldest timestamp (ms, signed) of the
 *       samples, exemplars and histograms of the framed series in body, and how many there
 *       are. Anything malformed, or not a bytes object, goes to the reference, which raises
 *       its error (or gives its result: a timestamp varint over 64 bits). */

/* The timestamp of the Sample (number 2), Exemplar (3) or Histogram (4) at d[vs:ve], as the
 * reference reads it (the usual Sample shape first; else the last timestamp field, 0 when
 * none): 1 and *ts, or 0 (the reference's). */
static int age_timestamp(const uint8_t *d, Py_ssize_t vs, Py_ssize_t ve, uint64_t number,
                         uint64_t *ts) {
    uint64_t value = 0;
    if (number == 2 && ve - vs >= 11 && d[vs] == 0x09 && d[vs + 9] == 0x10) {
        Py_ssize_t p = vs + 10;
        if (!read_varint(d, &p, ve, &value)) return 0;
    } else {
        uint64_t wanted = number == 4 ? 15 : number, field;
        Py_ssize_t pos = vs, fvs, fve;
        int wt;
        while (pos < ve) {
            if (!rw_field(d, &pos, ve, &field, &wt, &fvs, &fve)) return 0;
            if (field == wanted && wt == 0) {
                Py_ssize_t p = fvs;
                if (!read_varint(d, &p, fve, &value)) return 0;
            }
        }
    }
    *ts = value;
    return 1;
}

/* Walk the frames: 1 with the oldest timestamp (*any: one was seen) and the count, or 0. */
static int age_scan(const uint8_t *d, Py_ssize_t n, int *any, int64_t *oldest,
                    long long *samples) {
    Py_ssize_t pos = 0, vs, ve, fvs, fve;
    uint64_t number, field, ts;
    int wt, fwt;
    while (pos < n) {
        if (!rw_field(d, &pos, n, &number, &wt, &vs, &ve)) return 0;
        if (number != 1 || wt != 2) return 0;
        Py_ssize_t p = vs;
        while (p < ve) {
            if (!rw_field(d, &p, ve, &field, &fwt, &fvs, &fve)) return 0;
            if (fwt != 2 || field < 2 || field > 4) continue;
            if (!age_timestamp(d, fvs, fve, field, &ts)) return 0;
            int64_t t = (int64_t)ts; /* two's complement: the reference's signed int64 */
            if (!*any || t < *oldest) *oldest = t;
            *any = 1;
            (*samples)++;
        }
    }
    return 1;
}

/* Compiled rwrouter.wire.age.sample_ages_py(body). */
static PyObject *sample_ages(PyObject *module, PyObject *body) {
    (void)module;
    if (!PyBytes_CheckExact(body))
        return call_reference("rwrouter.wire.age", "sample_ages_py", &body, 1);
    int any = 0;
    int64_t oldest = 0;
    long long samples = 0;
    if (!age_scan((const uint8_t *)PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), &any,
                  &oldest, &samples))
        return call_reference("rwrouter.wire.age", "sample_ages_py", &body, 1);
    if (!any) return Py_BuildValue("(OL)", Py_None, samples);
    return Py_BuildValue("(LL)", (long long)oldest, samples);
}
