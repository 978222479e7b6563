/* The Kineto event scanner: one pass over a batch of trace events (a JSON array of objects)
 * that writes the fields the engine reads straight into columns, where the pure path builds a
 * Python object per event and per field (trace/columns.py, trace/scanned.py).
 *
 * It is an accelerator, never the reference: it accepts only input on which it gives exactly
 * what msgspec's typed decoding (kineto.WireEvent) gives, and answers None for anything else,
 * so the caller decodes that batch on the pure path, with its own errors and lenient fallback.
 * None for: any JSON syntax error; a backslash escape in a string it reads (names, categories,
 * keys); a lone or reversed surrogate escape, a control character or invalid UTF-8 in any
 * string; a field of another type than WireEvent declares; an
 * integer outside int64, or outside +-2**53 where a float is read; a float that does not parse
 * finite; a field written twice in one object; nesting deeper than 64.
 *
 * Names, categories and shape triples are deduplicated here (keyed by Python's randomized
 * bytes hash, so hostile input cannot force collisions) and returned once each, in order of
 * first appearance; events carry their index. A complete event's name is clipped as
 * ``Builder.intern`` clips it (to MAX_NAME_CHARS characters), so a long name is neither hashed
 * per event nor copied whole. An argument list (Input Dims, Input type, Concrete Inputs) written in
 * more than MAX_ARG_BYTES bytes is read as absent, as ``Builder`` reads it, and its triple says so
 * (``cut``), so that neither hashes nor copies a list of millions of entries.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define UNSET INT64_MIN
#define MAX_DEPTH 64
#define MAX_EXACT_INT 9007199254740992LL /* 2**53 */
/* coerce.MAX_NAME_CHARS (a test checks they agree): a longer name keeps its first
 * MAX_NAME_CHARS - 1 characters (code points) and ends in ELLIPSIS. */
#define MAX_NAME_CHARS 2000
/* coerce.MAX_ARG_BYTES (a test checks they agree): a longer argument list is read as absent. */
#define MAX_ARG_BYTES (64 * 1024)
static const char ELLIPSIS[] = "\xe2\x80\xa6"; /* U+2026, in UTF-8 */

/* -- growable columns ---------------------------------------------------------------------- */
typedef struct {
    char *data;
    Py_ssize_t len, cap; /* in bytes */
} Col;

static int col_push(Col *c, const void *v, Py_ssize_t size) {
    if (c->len + size > c->cap) {
        Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
        while (cap < c->len + size) cap *= 2;
        char *d = PyMem_RawRealloc(c->data, cap);
        if (!d) return -1;
        c->data = d;
        c->cap = cap;
    }
    memcpy(c->data + c->len, v, size);
    c->len += size;
    return 0;
}

/* -- a set of byte strings (slices of the input, or of three slices for shape triples) ------ */
typedef struct {
    const char *p[3];
    Py_ssize_t n[3];
    Py_hash_t hash;
    int cut; /* shape triples: bit i where part i was over MAX_ARG_BYTES (then empty) */
} Key;

typedef struct {
    Key *keys;       /* in first-appearance order */
    Py_ssize_t count, cap;
    int32_t *slots;  /* open addressing, -1 empty */
    Py_ssize_t nslots;
    int parts;       /* 1 for categories, 2 for names and tracks, 3 for shape triples */
    int joined;      /* names: each key is returned as one byte string, its parts joined */
} Set;

/* Python's randomized bytes hash (SipHash): public from 3.14, private before. */
static inline Py_hash_t hash_bytes(const void *p, Py_ssize_t n) {
#if PY_VERSION_HEX >= 0x030E0000
    return Py_HashBuffer(p, n);
#else
    return _Py_HashBytes(p, n);
#endif
}

static Py_hash_t key_hash(const Key *k, int parts) {
    Py_uhash_t h = 0x345678UL;
    for (int i = 0; i < parts; i++) {
        Py_hash_t x = hash_bytes(k->p[i], k->n[i]);
        h = (h ^ (Py_uhash_t)x) * 1000003UL;
    }
    return (Py_hash_t)(h ^ (Py_uhash_t)k->cut);
}

static int key_eq(const Key *a, const Key *b, int parts) {
    if (a->cut != b->cut) return 0;
    for (int i = 0; i < parts; i++)
        if (a->n[i] != b->n[i] || memcmp(a->p[i], b->p[i], a->n[i]) != 0) return 0;
    return 1;
}

static int set_grow(Set *s) {
    Py_ssize_t nslots = s->nslots ? s->nslots * 2 : 256;
    int32_t *slots = PyMem_RawMalloc(nslots * sizeof(int32_t));
    if (!slots) return -1;
    for (Py_ssize_t i = 0; i < nslots; i++) slots[i] = -1;
    for (Py_ssize_t k = 0; k < s->count; k++) {
        Py_ssize_t i = (Py_uhash_t)s->keys[k].hash & (nslots - 1);
        while (slots[i] >= 0) i = (i + 1) & (nslots - 1);
        slots[i] = (int32_t)k;
    }
    PyMem_RawFree(s->slots);
    s->slots = slots;
    s->nslots = nslots;
    return 0;
}

/* The index of ``k`` in the set, adding it if new; -1 on memory error. */
static int32_t set_index(Set *s, Key *k) {
    if ((s->count + 1) * 2 > s->nslots && set_grow(s) < 0) return -1;
    if (s->count >= INT32_MAX - 1) return -1;
    k->hash = key_hash(k, s->parts);
    Py_ssize_t i = (Py_uhash_t)k->hash & (s->nslots - 1);
    while (s->slots[i] >= 0) {
        Key *o = &s->keys[s->slots[i]];
        if (o->hash == k->hash && key_eq(o, k, s->parts)) return s->slots[i];
        i = (i + 1) & (s->nslots - 1);
    }
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        Key *keys = PyMem_RawRealloc(s->keys, cap * sizeof(Key));
        if (!keys) return -1;
        s->keys = keys;
        s->cap = cap;
    }
    s->keys[s->count] = *k;
    s->slots[i] = (int32_t)s->count;
    return (int32_t)s->count++;
}

static void set_free(Set *s) {
    PyMem_RawFree(s->keys);
    PyMem_RawFree(s->slots);
}

/* -- the lexer ---------------------------------------------------------------------------- */
typedef struct {
    const unsigned char *p, *end;
    PyThreadState *released; /* the scan runs without the GIL; the rare call that needs it takes it back */
} Lex;

/* Failure to read: the batch goes to the pure path. */
#define BAIL 1
#define NOMEM 2

static inline void ws(Lex *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\n' || *l->p == '\r' || *l->p == '\t')) l->p++;
}

static int utf8_ok(const unsigned char *s, const unsigned char *e) {
    while (s < e) {
        unsigned c = *s;
        if (c < 0x80) { s++; continue; }
        int n;
        unsigned min;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; min = 0x10000; }
        else return 0;
        if (e - s <= n) return 0;
        unsigned cp = c & (0x3F >> n);
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        s += n + 1;
    }
    return 1;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* The first byte at or after ``p`` that ends a run of plain string bytes (printable ASCII other
 * than '"' and '\\'), eight bytes at a time: a byte b is flagged when b ^ '"' or b ^ '\\' is
 * zero, when b < 0x20, or when its high bit is set. */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *end) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
        uint64_t flagged = ((q - ones) & ~q) | ((b - ones) & ~b) | ((x - ones * 0x20) & ~x) | x;
        flagged &= highs;
        if (flagged) {
            /* The lowest flagged byte is the first (little-endian loads, checked below); a borrow
             * can only flag bytes above a truly flagged one, never below it. */
            for (int i = 0; i < 8; i++) {
                unsigned c = p[i];
                if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) return p + i;
            }
        }
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
    return p;
}

/* A string at l->p (which is '"'). ``plain``: refuse any escape (a string whose value we read).
 * On success *s, *n hold the bytes between the quotes. */
static int string(Lex *l, const char **s, Py_ssize_t *n, int plain) {
    const unsigned char *p = l->p + 1, *start = p;
    int high = 0;
    for (;;) {
        p = plain_run(p, l->end);
        if (p >= l->end) return BAIL;
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) return BAIL;
        if (c >= 0x80) { high = 1; p++; continue; }
        /* a backslash */
        if (plain || p + 1 >= l->end) return BAIL;
        c = p[1];
        if (c == 'u') {
            unsigned cp;
            if (l->end - p < 6 || !hex4(p + 2, &cp)) return BAIL;
            if (cp >= 0xD800 && cp <= 0xDFFF) return BAIL; /* pairs too: rare, and the pure path knows them */
            p += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            p += 2;
        } else {
            return BAIL;
        }
    }
    if (high && !utf8_ok(start, p)) return BAIL;
    *s = (const char *)start;
    *n = p - start;
    l->p = p + 1;
    return 0;
}

/* A JSON number at l->p. *is_int: no fraction, no exponent. */
static int number(Lex *l, const unsigned char **s, Py_ssize_t *n, int *is_int) {
    const unsigned char *p = l->p, *e = l->end;
    if (p < e && *p == '-') p++;
    if (p >= e) return BAIL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < e && *p >= '0' && *p <= '9') p++; }
    else return BAIL;
    *is_int = 1;
    if (p < e && *p == '.') {
        p++;
        if (p >= e || *p < '0' || *p > '9') return BAIL;
        while (p < e && *p >= '0' && *p <= '9') p++;
        *is_int = 0;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return BAIL;
        while (p < e && *p >= '0' && *p <= '9') p++;
        *is_int = 0;
    }
    *s = l->p;
    *n = p - l->p;
    l->p = p;
    return 0;
}

static int to_int64(const unsigned char *s, Py_ssize_t n, int64_t *out) {
    int neg = s[0] == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (Py_ssize_t i = neg; i < n; i++) {
        unsigned d = s[i] - '0';
        if (v > (limit - d) / 10) return BAIL;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int literal(Lex *l, const char *word, Py_ssize_t n) {
    if (l->end - l->p < n || memcmp(l->p, word, n) != 0) return BAIL;
    l->p += n;
    return 0;
}

/* Any value, checked and skipped. */
static int skip(Lex *l, int depth) {
    if (l->p >= l->end) return BAIL;
    unsigned c = *l->p;
    const char *s;
    Py_ssize_t n;
    if (c == '"') return string(l, &s, &n, 0);
    if (c == '{' || c == '[') {
        unsigned close = c == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return BAIL;
        l->p++;
        ws(l);
        if (l->p < l->end && *l->p == close) { l->p++; return 0; }
        for (;;) {
            if (c == '{') {
                if (l->p >= l->end || *l->p != '"' || string(l, &s, &n, 0)) return BAIL;
                ws(l);
                if (l->p >= l->end || *l->p != ':') return BAIL;
                l->p++;
                ws(l);
            }
            if (skip(l, depth + 1)) return BAIL;
            ws(l);
            if (l->p >= l->end) return BAIL;
            if (*l->p == ',') { l->p++; ws(l); continue; }
            if (*l->p == close) { l->p++; return 0; }
            return BAIL;
        }
    }
    if (c == 't') return literal(l, "true", 4);
    if (c == 'f') return literal(l, "false", 5);
    if (c == 'n') return literal(l, "null", 4);
    const unsigned char *ns;
    int is_int;
    return number(l, &ns, &n, &is_int);
}

/* -- fields ------------------------------------------------------------------------------- */
static int read_int(Lex *l, int64_t *out, int nullable) {
    if (l->p < l->end && *l->p == 'n') {
        if (!nullable || literal(l, "null", 4)) return BAIL;
        *out = UNSET;
        return 0;
    }
    const unsigned char *s;
    Py_ssize_t n;
    int is_int;
    if (number(l, &s, &n, &is_int) || !is_int) return BAIL;
    return to_int64(s, n, out);
}

/* A pid or tid: an integer (its text) or a string (its text after the opening quote, the quote
 * included, so that 7 and "7" differ as they do to msgspec). */
static int read_id(Lex *l, const char **s, Py_ssize_t *n) {
    if (l->p < l->end && *l->p == '"') {
        const char *v;
        Py_ssize_t vn;
        if (string(l, &v, &vn, 1)) return BAIL;
        *s = v - 1;
        *n = vn + 1;
        return 0;
    }
    const unsigned char *v;
    int is_int;
    int64_t check;
    if (number(l, &v, n, &is_int) || !is_int || to_int64(v, *n, &check)) return BAIL;
    *s = (const char *)v;
    return 0;
}

/* Clinger's fast path: a decimal whose digits fit in 2**53 and whose power of ten is at most
 * 10**22 is one exact double divided or multiplied by another, which IEEE arithmetic rounds
 * correctly, so the result is the correctly rounded value (as a full parser gives). Kineto's
 * times (5466037291658.179) and durations take it. 0: not that case. */
static int fast_float(const unsigned char *s, Py_ssize_t n, double *out) {
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const unsigned char *p = s, *e = s + n;
    int neg = *p == '-';
    p += neg;
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0') digits++;
        if (digits > 19) return 0;
        m = m * 10 + (*p - '0');
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0') digits++;
            if (digits > 19) return 0;
            m = m * 10 + (*p - '0');
            exp10--;
        }
    }
    if (p != e) return 0; /* an exponent: the full parser */
    if (m > (1ULL << 53) || exp10 < -22) return 0;
    double v = (double)m;
    v = exp10 ? v / pow10[-exp10] : v;
    *out = neg ? -v : v;
    return 1;
}

static int read_float(Lex *l, double *out) {
    const unsigned char *s;
    Py_ssize_t n;
    int is_int;
    if (number(l, &s, &n, &is_int)) return BAIL;
    if (is_int) {
        int64_t v;
        if (to_int64(s, n, &v) || v > MAX_EXACT_INT || v < -MAX_EXACT_INT) return BAIL;
        *out = (double)v;
        return 0;
    }
    if (fast_float(s, n, out)) return 0;
    char buf[64];
    if (n >= (Py_ssize_t)sizeof buf) return BAIL;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *endp;
    if (l->released) PyEval_RestoreThread(l->released);
    double v = PyOS_string_to_double(buf, &endp, NULL);
    int failed = v == -1.0 && PyErr_Occurred();
    if (failed) PyErr_Clear();
    if (l->released) l->released = PyEval_SaveThread();
    if (failed) return BAIL;
    if (endp != buf + n || !isfinite(v)) return BAIL;
    *out = v;
    return 0;
}

/* An argument's value as written; over MAX_ARG_BYTES, checked and skipped, read as empty with bit ``bit`` of
 * ``*cut`` set. */
static int read_raw(Lex *l, const char **s, Py_ssize_t *n, int *cut, int bit) {
    static const char empty[] = "";
    const unsigned char *start = l->p;
    if (skip(l, 1)) return BAIL;
    *s = (const char *)start;
    *n = l->p - start;
    if (*n > MAX_ARG_BYTES) {
        *s = empty;
        *n = 0;
        *cut |= 1 << bit;
    }
    return 0;
}

#define KEY(k, lit) (k##n == (Py_ssize_t)sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)

typedef struct {
    int64_t ext, ext_lc, corr, seq, nbytes, total, dev_type, dev_id, graph;
    Key shape; /* p[0] NULL: no Input Dims */
} Args;

static void args_init(Args *a) {
    static const char empty[] = "";
    *a = (Args){UNSET, UNSET, UNSET, UNSET, UNSET, UNSET, UNSET, UNSET, UNSET, {{NULL, empty, empty}, {0, 0, 0}, 0, 0}};
}

static int read_args(Lex *l, Args *a) {
    args_init(a);
    if (l->p < l->end && *l->p == 'n') return literal(l, "null", 4);
    if (l->p >= l->end || *l->p != '{') return BAIL;
    l->p++;
    ws(l);
    if (l->p < l->end && *l->p == '}') { l->p++; return 0; }
    unsigned seen = 0;
    for (;;) {
        const char *k;
        Py_ssize_t kn;
        if (l->p >= l->end || *l->p != '"' || string(l, &k, &kn, 1)) return BAIL;
        ws(l);
        if (l->p >= l->end || *l->p != ':') return BAIL;
        l->p++;
        ws(l);
        int bit, err;
        if (KEY(k, "External id")) { bit = 0; err = read_int(l, &a->ext, 1); }
        else if (KEY(k, "external id")) { bit = 1; err = read_int(l, &a->ext_lc, 1); }
        else if (KEY(k, "correlation")) { bit = 2; err = read_int(l, &a->corr, 1); }
        else if (KEY(k, "Sequence number")) { bit = 3; err = read_int(l, &a->seq, 1); }
        else if (KEY(k, "Input Dims")) { bit = 4; err = read_raw(l, &a->shape.p[0], &a->shape.n[0], &a->shape.cut, 0); }
        else if (KEY(k, "Input type")) { bit = 5; err = read_raw(l, &a->shape.p[1], &a->shape.n[1], &a->shape.cut, 1); }
        else if (KEY(k, "Concrete Inputs")) {
            bit = 6;
            err = read_raw(l, &a->shape.p[2], &a->shape.n[2], &a->shape.cut, 2);
        }
        else if (KEY(k, "Bytes")) { bit = 7; err = read_int(l, &a->nbytes, 1); }
        else if (KEY(k, "Total Allocated")) { bit = 8; err = read_int(l, &a->total, 1); }
        else if (KEY(k, "Device Type")) { bit = 9; err = read_int(l, &a->dev_type, 1); }
        else if (KEY(k, "Device Id")) { bit = 10; err = read_int(l, &a->dev_id, 1); }
        else if (KEY(k, "graph id")) { bit = 11; err = read_int(l, &a->graph, 1); }
        else { bit = -1; err = skip(l, 2); }
        if (err) return BAIL;
        if (bit >= 0) {
            if (seen & (1u << bit)) return BAIL;
            seen |= 1u << bit;
        }
        ws(l);
        if (l->p >= l->end) return BAIL;
        if (*l->p == ',') { l->p++; ws(l); continue; }
        if (*l->p == '}') { l->p++; return 0; }
        return BAIL;
    }
}

/* The length of the part of ``s`` (``n`` bytes of valid UTF-8) that a clipped name keeps: all of it
 * where it has at most MAX_NAME_CHARS characters (``*clipped`` 0), else its first MAX_NAME_CHARS - 1
 * characters (``*clipped`` 1). */
static Py_ssize_t clipped_name(const char *s, Py_ssize_t n, int *clipped) {
    *clipped = 0;
    if (n <= MAX_NAME_CHARS) return n; /* no more characters than bytes */
    Py_ssize_t chars = 0, keep = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) == 0x80) continue; /* a continuation byte */
        if (chars == MAX_NAME_CHARS - 1) keep = i;
        if (++chars > MAX_NAME_CHARS) {
            *clipped = 1;
            return keep;
        }
    }
    return n;
}

/* -- the batch ---------------------------------------------------------------------------- */
typedef struct {
    Col x_ts, x_dur, x_name, x_cat, x_track, x_ext, x_ext_lc, x_corr, x_seq, x_shape, x_graph;
    Col m_ts, m_track, m_bytes, m_total, m_dtype, m_did;
    Set names, cats, tracks, shapes;
} Out;

static int event(Lex *l, Out *o) {
    if (l->p >= l->end || *l->p != '{') return BAIL;
    l->p++;
    ws(l);
    const char *ph = "", *name = "", *cat = NULL;
    Py_ssize_t phn = 0, namen = 0, catn = 0;
    static const char zero[] = "0";
    Key track = {{zero, zero, NULL}, {1, 1, 0}, 0, 0}; /* pid, tid: 0 where absent */
    double ts = NAN, dur = 0.0;
    Args a;
    int err;
    args_init(&a);
    unsigned seen = 0;
    if (l->p < l->end && *l->p == '}') { l->p++; goto done; }
    for (;;) {
        const char *k;
        Py_ssize_t kn;
        if (l->p >= l->end || *l->p != '"' || string(l, &k, &kn, 1)) return BAIL;
        ws(l);
        if (l->p >= l->end || *l->p != ':') return BAIL;
        l->p++;
        ws(l);
        int bit;
        int is_str = l->p < l->end && *l->p == '"';
        if (KEY(k, "ph")) { bit = 0; err = !is_str || string(l, &ph, &phn, 1); }
        else if (KEY(k, "name")) { bit = 1; err = !is_str || string(l, &name, &namen, 1); }
        else if (KEY(k, "cat")) {
            bit = 2;
            if (is_str) err = string(l, &cat, &catn, 1);
            else { err = literal(l, "null", 4); cat = NULL; }
        }
        else if (KEY(k, "pid")) { bit = 3; err = read_id(l, &track.p[0], &track.n[0]); }
        else if (KEY(k, "tid")) { bit = 4; err = read_id(l, &track.p[1], &track.n[1]); }
        else if (KEY(k, "ts")) { bit = 5; err = read_float(l, &ts); }
        else if (KEY(k, "dur")) { bit = 6; err = read_float(l, &dur); }
        else if (KEY(k, "args")) { bit = 7; err = read_args(l, &a); }
        else { bit = -1; err = skip(l, 1); }
        if (err) return BAIL;
        if (bit >= 0) {
            if (seen & (1u << bit)) return BAIL;
            seen |= 1u << bit;
        }
        ws(l);
        if (l->p >= l->end) return BAIL;
        if (*l->p == ',') { l->p++; ws(l); continue; }
        if (*l->p == '}') { l->p++; break; }
        return BAIL;
    }
done:
    if (phn != 1 || (ph[0] != 'X' && !(ph[0] == 'i' && namen == 8 && memcmp(name, "[memory]", 8) == 0))) return 0;
    int32_t ti = set_index(&o->tracks, &track);
    if (ti < 0) return NOMEM;
    if (ph[0] == 'X') {
        int clipped;
        Py_ssize_t keep = clipped_name(name, namen, &clipped);
        Key nk = {{name, clipped ? ELLIPSIS : "", NULL}, {keep, clipped ? (Py_ssize_t)sizeof ELLIPSIS - 1 : 0, 0}, 0,
                  0};
        int32_t ni = set_index(&o->names, &nk), ci = -1, si = -1;
        if (ni < 0) return NOMEM;
        if (cat) {
            Key ck = {{cat, NULL, NULL}, {catn, 0, 0}, 0, 0};
            if ((ci = set_index(&o->cats, &ck)) < 0) return NOMEM;
        }
        if (a.shape.p[0] || a.shape.cut) { /* a list cut counts, with or without Input Dims */
            static const char empty[] = "";
            if (!a.shape.p[0]) a.shape.p[0] = empty;
            if ((si = set_index(&o->shapes, &a.shape)) < 0) return NOMEM;
        }
        if (col_push(&o->x_ts, &ts, 8) || col_push(&o->x_dur, &dur, 8) || col_push(&o->x_name, &ni, 4) ||
            col_push(&o->x_cat, &ci, 4) || col_push(&o->x_track, &ti, 4) ||
            col_push(&o->x_ext, &a.ext, 8) || col_push(&o->x_ext_lc, &a.ext_lc, 8) ||
            col_push(&o->x_corr, &a.corr, 8) || col_push(&o->x_seq, &a.seq, 8) || col_push(&o->x_shape, &si, 4) ||
            col_push(&o->x_graph, &a.graph, 8))
            return NOMEM;
    } else {
        if (col_push(&o->m_ts, &ts, 8) || col_push(&o->m_track, &ti, 4) ||
            col_push(&o->m_bytes, &a.nbytes, 8) || col_push(&o->m_total, &a.total, 8) ||
            col_push(&o->m_dtype, &a.dev_type, 8) || col_push(&o->m_did, &a.dev_id, 8))
            return NOMEM;
    }
    return 0;
}

static int batch(Lex *l, Out *o) {
    ws(l);
    if (l->p >= l->end || *l->p != '[') return BAIL;
    l->p++;
    ws(l);
    if (l->p < l->end && *l->p == ']') { l->p++; goto end; }
    for (;;) {
        int err = event(l, o);
        if (err) return err;
        ws(l);
        if (l->p >= l->end) return BAIL;
        if (*l->p == ',') { l->p++; ws(l); continue; }
        if (*l->p == ']') { l->p++; break; }
        return BAIL;
    }
end:
    ws(l);
    return l->p == l->end ? 0 : BAIL;
}

/* -- to Python ------------------------------------------------------------------------------ */
static PyObject *col_bytes(Col *c) { return PyBytes_FromStringAndSize(c->data ? c->data : "", c->len); }

static PyObject *set_list(Set *s) {
    PyObject *list = PyList_New(s->count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < s->count; i++) {
        Key *k = &s->keys[i];
        PyObject *item;
        if (s->parts == 1) {
            item = PyBytes_FromStringAndSize(k->p[0], k->n[0]);
        } else if (s->joined) {
            item = PyBytes_FromStringAndSize(NULL, k->n[0] + k->n[1]);
            if (item) {
                memcpy(PyBytes_AS_STRING(item), k->p[0], k->n[0]);
                memcpy(PyBytes_AS_STRING(item) + k->n[0], k->p[1], k->n[1]);
            }
        } else if (s->parts == 2) {
            item = PyTuple_New(2);
            for (int j = 0; item && j < 2; j++) {
                PyObject *v;
                if (k->p[j][0] == '"') {
                    v = PyUnicode_DecodeUTF8(k->p[j] + 1, k->n[j] - 1, "strict");
                } else {
                    int64_t x = 0;
                    to_int64((const unsigned char *)k->p[j], k->n[j], &x);
                    v = PyLong_FromLongLong(x);
                }
                if (!v) { Py_CLEAR(item); break; }
                PyTuple_SET_ITEM(item, j, v);
            }
        } else {
            item = Py_BuildValue("(y#y#y#i)", k->p[0], k->n[0], k->p[1], k->n[1], k->p[2], k->n[2], k->cut);
        }
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *result(Out *o) {
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}{s:N,s:N,s:N,s:N,s:N,s:N}NNNN",
        "ts", col_bytes(&o->x_ts), "dur", col_bytes(&o->x_dur), "name", col_bytes(&o->x_name),
        "cat", col_bytes(&o->x_cat), "track", col_bytes(&o->x_track),
        "ext", col_bytes(&o->x_ext), "ext_lc", col_bytes(&o->x_ext_lc), "corr", col_bytes(&o->x_corr),
        "seq", col_bytes(&o->x_seq), "shape", col_bytes(&o->x_shape), "graph", col_bytes(&o->x_graph),
        "ts", col_bytes(&o->m_ts), "track", col_bytes(&o->m_track),
        "bytes", col_bytes(&o->m_bytes), "total", col_bytes(&o->m_total), "dtype", col_bytes(&o->m_dtype),
        "did", col_bytes(&o->m_did),
        set_list(&o->names), set_list(&o->cats), set_list(&o->tracks), set_list(&o->shapes));
}

static void out_free(Out *o) {
    Col *cols[] = {&o->x_ts, &o->x_dur, &o->x_name, &o->x_cat, &o->x_track, &o->x_ext, &o->x_ext_lc, &o->x_corr,
                   &o->x_seq, &o->x_shape, &o->x_graph, &o->m_ts, &o->m_track, &o->m_bytes, &o->m_total, &o->m_dtype,
                   &o->m_did};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) PyMem_RawFree(cols[i]->data);
    set_free(&o->names);
    set_free(&o->cats);
    set_free(&o->tracks);
    set_free(&o->shapes);
}

PyDoc_STRVAR(scan_doc,
"scan(text) -> (x_columns, memory_columns, names, categories, tracks, shape_keys) or None\n\n"
"The complete (\"X\") and memory events of a JSON array of trace events, as little-endian\n"
"column bytes, with names (clipped to MAX_NAME_CHARS characters), categories, (pid, tid) pairs\n"
"and (Input Dims, Input type, Concrete Inputs, cut) shape keys once each in order of first appearance\n"
"(an argument over MAX_ARG_BYTES bytes is empty, with bit 0, 1 or 2 of cut set).\n"
"None where the pure path must decode the batch.");

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o;
    memset(&o, 0, sizeof o);
    o.cats.parts = 1;
    o.names.parts = o.tracks.parts = 2;
    o.names.joined = 1;
    o.shapes.parts = 3;
    Lex l = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len, NULL};
    /* Without the GIL, so that batches scan in several threads at once (trace/decode.py) and a
     * server's other threads run meanwhile. Only plain C runs here: raw allocations, and the
     * bytes hash, which reads the interpreter's fixed secret key. The buffer is held, so it
     * cannot be resized; callers pass bytes, or a bytearray no other thread touches. */
    l.released = PyEval_SaveThread();
    int err = batch(&l, &o);
    PyEval_RestoreThread(l.released);
    PyObject *res;
    if (err == NOMEM) res = PyErr_NoMemory();
    else if (err) res = Py_NewRef(Py_None);
    else res = result(&o);
    out_free(&o);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The Kineto event scanner (see scanned.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "MAX_NAME_CHARS", MAX_NAME_CHARS) < 0 ||
              PyModule_AddIntConstant(m, "MAX_ARG_BYTES", MAX_ARG_BYTES) < 0))
        Py_CLEAR(m);
    return m;
}
