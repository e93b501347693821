/* safetensors reader: header validation and sliced pread(2) reads. */
#include "model/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/files.h"
#include "common/json.h"
#include "common/tensor.h"
#include "common/utf8.h"

#define STAGING_BYTES ((size_t)1 << 20)

struct weft_st_file {
    char *path;
    int fd;             /* -1 for an in-memory image */
    const uint8_t *mem; /* in-memory image */
    uint64_t size;
    uint64_t data_start;
    size_t n_tensors;
    struct weft_st_tensor *tensors; /* offset order */
    size_t *by_name;                /* indices into tensors, sorted by name */
    size_t n_meta;
    struct weft_st_meta *meta;
    char *strings; /* names, dtype names and metadata, one arena */
    uint64_t bytes_read;
    void *staging;
};

static const struct {
    const char *name;
    unsigned bits;
    int dtype;
} st_dtypes[] = {
    {"BOOL", 8, -1},       {"F4", 4, -1},          {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},    {"U8", 8, WEFT_DTYPE_U8}, {"I8", 8, -1},
    {"F8_E5M2", 8, -1},    {"F8_E4M3", 8, -1},     {"F8_E8M0", 8, -1},
    {"F8_E4M3FNUZ", 8, -1}, {"F8_E5M2FNUZ", 8, -1}, {"I16", 16, -1},
    {"U16", 16, -1},       {"F16", 16, WEFT_DTYPE_F16}, {"BF16", 16, WEFT_DTYPE_BF16},
    {"I32", 32, WEFT_DTYPE_I32}, {"U32", 32, -1},  {"F32", 32, WEFT_DTYPE_F32},
    {"C64", 64, -1},       {"F64", 64, WEFT_DTYPE_F64}, {"I64", 64, WEFT_DTYPE_I64},
    {"U64", 64, -1},
};
#define N_ST_DTYPES (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

/* ---------------------------------------------------------------------------------------- */
/* Header parsing                                                                            */

struct parse {
    const char *name; /* file name for messages */
    struct weft_st_file *f;
    char *arena_next;
    struct weft_error *err; /* the cause goes here when given, else to the log at ERROR */
};

static void perr(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A header that breaks the format: the file's fault. */
static void perr(struct parse *p, const char *fmt, ...)
{
    char msg[WEFT_ERROR_MSG];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a false positive on glibc */
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    weft_error_refuse_or_log(p->err, WEFT_ERR_FORMAT, "safetensors", "%s", msg);
}

static char *arena_put(struct parse *p, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = p->arena_next;
    memcpy(d, s, n);
    p->arena_next += n;
    return d;
}

/* A JSON number that is an exact non-negative integer a double can hold. */
static int json_u64(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double d = item->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d))
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static weft_status_t parse_tensor(struct parse *p, const cJSON *entry, struct weft_st_tensor *t)
{
    const char *file = p->name, *name = entry->string;
    if (!cJSON_IsObject(entry)) {
        perr(p, "%s: tensor '%s': entry is not a JSON object", file, name);
        return WEFT_ERR_FORMAT;
    }
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *c = entry->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dtype
                             : strcmp(c->string, "shape") == 0        ? &shape
                             : strcmp(c->string, "data_offsets") == 0 ? &offsets
                                                                      : NULL;
        if (!slot) {
            perr(p, "%s: tensor '%s': unknown field '%s'", file, name,
                           c->string);
            return WEFT_ERR_FORMAT;
        }
        if (*slot) {
            perr(p, "%s: tensor '%s': duplicate field '%s'", file, name,
                           c->string);
            return WEFT_ERR_FORMAT;
        }
        *slot = c;
    }
    if (!dtype || !shape || !offsets) {
        perr(p, "%s: tensor '%s': missing field '%s'", file, name,
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
        return WEFT_ERR_FORMAT;
    }
    if (!cJSON_IsString(dtype)) {
        perr(p, "%s: tensor '%s': dtype is not a string", file, name);
        return WEFT_ERR_FORMAT;
    }
    size_t d;
    for (d = 0; d < N_ST_DTYPES; d++)
        if (strcmp(dtype->valuestring, st_dtypes[d].name) == 0)
            break;
    if (d == N_ST_DTYPES) {
        perr(p, "%s: tensor '%s': unknown dtype '%.32s'", file, name,
                       dtype->valuestring);
        return WEFT_ERR_FORMAT;
    }
    if (!cJSON_IsArray(shape)) {
        perr(p, "%s: tensor '%s': shape is not an array", file, name);
        return WEFT_ERR_FORMAT;
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > WEFT_ST_MAX_DIMS) {
        perr(p, "%s: tensor '%s': %d dimensions, more than the %d supported",
                       file, name, ndim, WEFT_ST_MAX_DIMS);
        return WEFT_ERR_FORMAT;
    }
    memset(t, 0, sizeof(*t));
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *c = shape->child; c; c = c->next, i++) {
        uint64_t dim;
        if (json_u64(c, &dim) != 0) {
            perr(p, "%s: tensor '%s': shape[%d] is not a non-negative "
                                          "integer below 2^53", file, name, i);
            return WEFT_ERR_FORMAT;
        }
        t->shape[i] = (int64_t)dim;
        if (__builtin_mul_overflow(numel, dim, &numel) || numel > (uint64_t)INT64_MAX) {
            perr(p, "%s: tensor '%s': shape has more than 2^63 elements",
                           file, name);
            return WEFT_ERR_FORMAT;
        }
    }
    uint64_t bits;
    if (__builtin_mul_overflow(numel, (uint64_t)st_dtypes[d].bits, &bits)) {
        perr(p, "%s: tensor '%s': byte size overflows 64 bits", file, name);
        return WEFT_ERR_FORMAT;
    }
    if (bits % 8 != 0) {
        perr(p, "%s: tensor '%s': %llu elements of %s do not fill whole "
                                      "bytes", file, name, (unsigned long long)numel,
                       st_dtypes[d].name);
        return WEFT_ERR_FORMAT;
    }
    uint64_t begin, end;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        json_u64(offsets->child, &begin) != 0 || json_u64(offsets->child->next, &end) != 0) {
        perr(p, "%s: tensor '%s': data_offsets is not [begin, end] of "
                                      "non-negative integers", file, name);
        return WEFT_ERR_FORMAT;
    }
    if (end < begin) {
        perr(p, "%s: tensor '%s': data_offsets [%llu, %llu] end before "
                                      "begin", file, name, (unsigned long long)begin,
                       (unsigned long long)end);
        return WEFT_ERR_FORMAT;
    }
    if (end - begin != bits / 8) {
        char sh[160];
        perr(p, "%s: tensor '%s': data_offsets [%llu, %llu] span %llu "
                                      "bytes but %s %s needs %llu", file, name,
                       (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)(end - begin), st_dtypes[d].name,
                       weft_shape_str(ndim, t->shape, sh, sizeof(sh)),
                       (unsigned long long)(bits / 8));
        return WEFT_ERR_FORMAT;
    }
    t->name = arena_put(p, name);
    t->dtype_name = st_dtypes[d].name;
    t->dtype = st_dtypes[d].dtype;
    t->bits = st_dtypes[d].bits;
    t->ndim = ndim;
    t->numel = (int64_t)numel;
    t->offset = begin; /* relative until the layout is checked */
    t->nbytes = end - begin;
    return WEFT_OK;
}

static weft_status_t parse_meta(struct parse *p, const cJSON *m)
{
    if (!cJSON_IsObject(m)) {
        perr(p, "%s: __metadata__ is not an object of strings", p->name);
        return WEFT_ERR_FORMAT;
    }
    size_t n = (size_t)cJSON_GetArraySize(m), i = 0;
    p->f->meta = weft_calloc(n, sizeof(*p->f->meta));
    if (!p->f->meta)
        return WEFT_ERR_NOMEM;
    for (const cJSON *c = m->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) {
            perr(p, "%s: __metadata__ value of '%s' is not a string",
                           p->name, c->string);
            return WEFT_ERR_FORMAT;
        }
        for (size_t k = 0; k < i; k++) {
            if (strcmp(p->f->meta[k].key, c->string) == 0) {
                perr(p, "%s: __metadata__ key '%s' appears twice", p->name,
                               c->string);
                return WEFT_ERR_FORMAT;
            }
        }
        p->f->meta[i].key = arena_put(p, c->string);
        p->f->meta[i].value = arena_put(p, c->valuestring);
    }
    p->f->n_meta = n;
    return WEFT_OK;
}

static int by_offset(const void *a, const void *b)
{
    const struct weft_st_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b, void *base)
{
    const struct weft_st_tensor *t = base;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Sorted by offset, contiguous from 0, and ending exactly at the end of the file. */
static weft_status_t check_layout(struct parse *p, uint64_t data_len)
{
    struct weft_st_file *f = p->f;
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), by_offset);
    uint64_t expect = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct weft_st_tensor *t = &f->tensors[i];
        if (t->offset != expect) {
            perr(p, "%s: tensor '%s': data starts at %llu but the previous "
                                          "tensor ends at %llu (%s)", p->name, t->name,
                           (unsigned long long)t->offset, (unsigned long long)expect,
                           t->offset < expect ? "overlap" : "gap");
            return WEFT_ERR_FORMAT;
        }
        expect = t->offset + t->nbytes;
        if (expect > data_len) {
            perr(p, "%s: tensor '%s': data ends at %llu, past the end of "
                                          "the %llu-byte data buffer", p->name, t->name,
                           (unsigned long long)expect, (unsigned long long)data_len);
            return WEFT_ERR_FORMAT;
        }
        t->offset += f->data_start;
    }
    if (expect != data_len) {
        perr(p, "%s: the data buffer is %llu bytes but the tensors cover "
                                      "%llu (trailing bytes)", p->name,
                       (unsigned long long)data_len, (unsigned long long)expect);
        return WEFT_ERR_FORMAT;
    }
    f->by_name = weft_malloc(f->n_tensors * sizeof(*f->by_name) + 1);
    if (!f->by_name)
        return WEFT_ERR_NOMEM;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, f->n_tensors, sizeof(*f->by_name), by_name, f->tensors);
    for (size_t i = 1; i < f->n_tensors; i++) {
        const char *a = f->tensors[f->by_name[i - 1]].name, *b = f->tensors[f->by_name[i]].name;
        if (strcmp(a, b) == 0) {
            perr(p, "%s: tensor '%s' appears twice", p->name, a);
            return WEFT_ERR_FORMAT;
        }
    }
    return WEFT_OK;
}

static weft_status_t parse_header(struct parse *p, const char *json, size_t len,
                                  uint64_t data_len)
{
    size_t bad_at;
    if (!weft_utf8_valid(json, len, &bad_at)) {
        perr(p, "%s: header is not valid UTF-8 (byte %zu)", p->name,
                       bad_at);
        return WEFT_ERR_FORMAT;
    }
    size_t strict_len = len; /* the padding: spaces (the format's), or NULs */
    while (strict_len > 0 && json[strict_len - 1] == '\0')
        strict_len--;
    char why[160];
    if (!weft_json_strict(json, strict_len, 64, why, sizeof(why))) {
        perr(p, "%s: header is not valid JSON: %s", p->name, why);
        return WEFT_ERR_FORMAT;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        perr(p, "%s: header is not valid JSON (near byte %zu)", p->name,
                       end ? (size_t)(end - json) : (size_t)0);
        return WEFT_ERR_FORMAT;
    }
    weft_status_t st = WEFT_OK;
    for (const char *q = end; q < json + len; q++) {
        if (*q != ' ' && *q != '\n' && *q != '\r' && *q != '\t' && *q != '\0') {
            perr(p, "%s: header has text after the JSON object (byte %zu)",
                           p->name, (size_t)(q - json));
            st = WEFT_ERR_FORMAT;
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        perr(p, "%s: header is not a JSON object", p->name);
        st = WEFT_ERR_FORMAT;
        goto out;
    }
    size_t n = 0;
    const cJSON *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (meta) {
                perr(p, "%s: __metadata__ appears twice", p->name);
                st = WEFT_ERR_FORMAT;
                goto out;
            }
            meta = c;
        } else if (c->string[0] == '\0') {
            perr(p, "%s: a tensor has an empty name", p->name);
            st = WEFT_ERR_FORMAT;
            goto out;
        } else {
            n++;
        }
    }
    /* Every string kept is a substring of the header, so len + terminators bounds the arena. */
    struct weft_st_file *f = p->f;
    f->strings = weft_malloc(2 * len + 16);
    f->tensors = weft_calloc(n, sizeof(*f->tensors));
    if (!f->strings || !f->tensors) {
        st = WEFT_ERR_NOMEM;
        goto out;
    }
    p->arena_next = f->strings;
    if (meta && (st = parse_meta(p, meta)) != WEFT_OK)
        goto out;
    size_t i = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == meta)
            continue;
        if ((st = parse_tensor(p, c, &f->tensors[i])) != WEFT_OK)
            goto out;
        i++;
    }
    f->n_tensors = n;
    st = check_layout(p, data_len);
out:
    cJSON_Delete(root);
    return st;
}

static weft_status_t open_common(struct weft_st_file *f, const char *name,
                                 struct weft_error *err)
{
    struct parse p = {.name = name, .f = f, .err = err};
    if (f->size < 8) {
        perr(&p, "%s: %llu bytes, too short for the 8-byte header length",
                       name, (unsigned long long)f->size);
        return WEFT_ERR_FORMAT;
    }
    uint8_t lenbuf[8];
    if (f->mem) {
        memcpy(lenbuf, f->mem, 8);
    } else if (pread(f->fd, lenbuf, 8, 0) != 8) {
        return weft_error_set(err, WEFT_ERR_IO, "safetensors",
                              "%s: cannot read the header length: %s", name, strerror(errno));
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | lenbuf[i];
    if (hlen > WEFT_ST_MAX_HEADER) {
        perr(&p, "%s: header length %llu exceeds the %llu-byte limit", name,
                       (unsigned long long)hlen, WEFT_ST_MAX_HEADER);
        return WEFT_ERR_FORMAT;
    }
    if (hlen > f->size - 8) {
        perr(&p, "%s: header length %llu runs past the end of the file "
                                      "(%llu bytes)", name, (unsigned long long)hlen,
                       (unsigned long long)f->size);
        return WEFT_ERR_FORMAT;
    }
    f->data_start = 8 + hlen;
    char *json = weft_malloc(hlen + 1);
    if (!json)
        return WEFT_ERR_NOMEM;
    weft_status_t st = WEFT_OK;
    if (f->mem) {
        memcpy(json, f->mem + 8, hlen);
    } else {
        size_t got = 0;
        while (got < hlen) {
            ssize_t r = pread(f->fd, json + got, hlen - got, (off_t)(8 + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                st = weft_error_set(err, WEFT_ERR_IO, "safetensors",
                                    "%s: cannot read the header: %s", name,
                                    r < 0 ? strerror(errno) : "unexpected end of file");
                goto out;
            }
            got += (size_t)r;
        }
    }
    json[hlen] = '\0';
    st = parse_header(&p, json, hlen, f->size - f->data_start);
out:
    weft_free(json);
    return st;
}

static struct weft_st_file *file_new(const char *name)
{
    struct weft_st_file *f = weft_calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->fd = -1;
    f->path = weft_strdup(name);
    if (!f->path) {
        weft_free(f);
        return NULL;
    }
    return f;
}

weft_status_t weft_st_open(const char *path, struct weft_st_file **file_p,
                           struct weft_error *err)
{
    struct weft_st_file *f = file_new(path);
    if (!f)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    weft_status_t st;
    f->fd = weft_files_open_regular(path); /* a FIFO would block open(2) */
    if (f->fd < 0) {
        int e = errno;
        st = weft_error_refuse_or_log(err, e == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO,
                                      "safetensors", "%s: cannot open: %s", path,
                                      weft_files_open_error(e));
        goto err_close;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = weft_error_refuse_or_log(err, WEFT_ERR_IO, "safetensors", "%s: not a regular file",
                                      path);
        goto err_close;
    }
    f->size = (uint64_t)sb.st_size;
    st = open_common(f, path, err);
    if (st != WEFT_OK)
        goto err_close;
    *file_p = f;
    return WEFT_OK;
err_close:
    if (st == WEFT_ERR_NOMEM)
        weft_error_refuse(err, st, "out of memory");
    weft_st_close(f);
    return st;
}

weft_status_t weft_st_open_memory(const char *name, const void *data, size_t size,
                                  struct weft_st_file **file_p, struct weft_error *err)
{
    struct weft_st_file *f = file_new(name);
    if (!f)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    f->mem = data;
    f->size = size;
    weft_status_t st = open_common(f, name, err);
    if (st != WEFT_OK) {
        if (st == WEFT_ERR_NOMEM)
            weft_error_refuse(err, st, "out of memory");
        weft_st_close(f);
        return st;
    }
    *file_p = f;
    return WEFT_OK;
}

void weft_st_close(struct weft_st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    weft_free(f->path);
    weft_free(f->tensors);
    weft_free(f->by_name);
    weft_free(f->meta);
    weft_free(f->strings);
    weft_big_free(f->staging, STAGING_BYTES);
    weft_free(f);
}

const char *weft_st_path(const struct weft_st_file *f)
{
    return f->path;
}

size_t weft_st_count(const struct weft_st_file *f)
{
    return f->n_tensors;
}

const struct weft_st_tensor *weft_st_at(const struct weft_st_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct weft_st_tensor *weft_st_find(const struct weft_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[f->by_name[mid]].name, name);
        if (c == 0)
            return &f->tensors[f->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t weft_st_meta_count(const struct weft_st_file *f)
{
    return f->n_meta;
}

const struct weft_st_meta *weft_st_meta_at(const struct weft_st_file *f, size_t i)
{
    return i < f->n_meta ? &f->meta[i] : NULL;
}

uint64_t weft_st_file_size(const struct weft_st_file *f)
{
    return f->size;
}

uint64_t weft_st_bytes_read(const struct weft_st_file *f)
{
    return f->bytes_read;
}

/* ---------------------------------------------------------------------------------------- */
/* Reads                                                                                     */

/* len bytes at off for tensor t (named in the error). */
static weft_status_t read_at(struct weft_st_file *f, const struct weft_st_tensor *t, uint64_t off,
                             void *dst, size_t len, struct weft_error *err)
{
    f->bytes_read += len;
    if (f->mem) {
        memcpy(dst, f->mem + off, len);
        return WEFT_OK;
    }
    char *d = dst;
    while (len) {
        ssize_t r = pread(f->fd, d, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return weft_error_set(err, WEFT_ERR_IO, "safetensors",
                                  "%s: tensor '%s': read of %zu bytes at offset %llu failed: %s",
                                  f->path, t->name, len, (unsigned long long)off,
                                  r < 0 ? strerror(errno)
                                        : "unexpected end of file (file truncated?)");
        d += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return WEFT_OK;
}

/* n elements of t's dtype at file offset off, into dst[index] of dst_dtype. */
static weft_status_t read_run(struct weft_st_file *f, const struct weft_st_tensor *t,
                              uint64_t off, size_t n, void *dst, size_t index,
                              enum weft_dtype dst_dtype, struct weft_error *err)
{
    size_t esz = t->bits / 8, dsz = weft_dtype_size(dst_dtype);
    char *d = (char *)dst + index * dsz;
    if ((int)dst_dtype == t->dtype)
        return read_at(f, t, off, d, n * esz, err);
    if (dsz >= esz) { /* widen in place: raw bytes land at the start of the slot */
        weft_status_t st = read_at(f, t, off, d, n * esz, err);
        if (st == WEFT_OK)
            weft_dtype_convert(d, dst_dtype, d, (enum weft_dtype)t->dtype, n);
        return st;
    }
    if (!f->staging && !(f->staging = weft_big_alloc(STAGING_BYTES)))
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    size_t per = STAGING_BYTES / esz;
    while (n) {
        size_t k = n < per ? n : per;
        weft_status_t st = read_at(f, t, off, f->staging, k * esz, err);
        if (st != WEFT_OK)
            return st;
        weft_dtype_convert(d, dst_dtype, f->staging, (enum weft_dtype)t->dtype, k);
        d += k * dsz;
        off += k * esz;
        n -= k;
    }
    return WEFT_OK;
}

static weft_status_t check_readable(const struct weft_st_file *f, const struct weft_st_tensor *t,
                                    enum weft_dtype dst_dtype, struct weft_error *err)
{
    if ((int)dst_dtype == t->dtype)
        return WEFT_OK;
    bool src_float = t->dtype == WEFT_DTYPE_F32 || t->dtype == WEFT_DTYPE_BF16 ||
                     t->dtype == WEFT_DTYPE_F16;
    bool dst_float = dst_dtype == WEFT_DTYPE_F32 || dst_dtype == WEFT_DTYPE_BF16 ||
                     dst_dtype == WEFT_DTYPE_F16;
    if (src_float && dst_float)
        return WEFT_OK;
    return weft_error_refuse_or_log(err, WEFT_ERR_UNSUPPORTED, "safetensors",
                                    "%s: tensor '%s': cannot read %s as %s", f->path, t->name,
                                    t->dtype_name, weft_dtype_name(dst_dtype));
}

weft_status_t weft_st_read(struct weft_st_file *f, const struct weft_st_tensor *t, void *dst,
                           enum weft_dtype dst_dtype, struct weft_error *err)
{
    weft_status_t st = check_readable(f, t, dst_dtype, err);
    if (st != WEFT_OK)
        return st;
    return read_run(f, t, t->offset, (size_t)t->numel, dst, 0, dst_dtype, err);
}

weft_status_t weft_st_read_ranges(struct weft_st_file *f, const struct weft_st_tensor *t,
                                  int dim, size_t n_ranges, const struct weft_range *ranges,
                                  void *dst, enum weft_dtype dst_dtype, struct weft_error *err)
{
    weft_status_t st = check_readable(f, t, dst_dtype, err);
    if (st != WEFT_OK)
        return st;
    if (dim < 0 || dim > 1 || dim >= t->ndim)
        return weft_error_set(err, WEFT_ERR_INVALID, "safetensors",
                              "%s: tensor '%s': cannot slice dim %d of a %d-d tensor", f->path,
                              t->name, dim, t->ndim);
    int64_t total = 0;
    for (size_t k = 0; k < n_ranges; k++) {
        if (ranges[k].begin < 0 || ranges[k].end < ranges[k].begin ||
            ranges[k].end > t->shape[dim])
            return weft_error_set(err, WEFT_ERR_RANGE, "safetensors",
                                  "%s: tensor '%s': range [%lld, %lld) outside dim %d of size "
                                  "%lld", f->path, t->name, (long long)ranges[k].begin,
                                  (long long)ranges[k].end, dim, (long long)t->shape[dim]);
        total += ranges[k].end - ranges[k].begin;
    }
    size_t esz = t->bits / 8;
    /* View t as [d0, d1, inner]. */
    int64_t inner = 1;
    for (int i = 2; i < t->ndim; i++)
        inner *= t->shape[i];
    if (dim == 0) {
        int64_t row = t->ndim > 1 ? t->shape[1] * inner : 1;
        size_t index = 0;
        for (size_t k = 0; k < n_ranges; k++) {
            size_t n = (size_t)((ranges[k].end - ranges[k].begin) * row);
            uint64_t off = t->offset + (uint64_t)(ranges[k].begin * row) * esz;
            if ((st = read_run(f, t, off, n, dst, index, dst_dtype, err)) != WEFT_OK)
                return st;
            index += n;
        }
        return WEFT_OK;
    }
    /* dim 1: strided runs, merged when both the file and dst sides are contiguous. */
    int64_t d0 = t->shape[0], d1 = t->shape[1];
    uint64_t run_off = 0;
    size_t run_n = 0, run_index = 0;
    for (int64_t i = 0; i < d0; i++) {
        int64_t col = 0;
        for (size_t k = 0; k < n_ranges; k++) {
            int64_t len = ranges[k].end - ranges[k].begin;
            if (len == 0)
                continue;
            uint64_t off = t->offset + (uint64_t)((i * d1 + ranges[k].begin) * inner) * esz;
            size_t index = (size_t)((i * total + col) * inner);
            size_t n = (size_t)(len * inner);
            col += len;
            if (run_n && run_off + run_n * esz == off && run_index + run_n == index) {
                run_n += n;
                continue;
            }
            if (run_n &&
                (st = read_run(f, t, run_off, run_n, dst, run_index, dst_dtype, err)) != 0)
                return st;
            run_off = off, run_n = n, run_index = index;
        }
    }
    if (run_n)
        st = read_run(f, t, run_off, run_n, dst, run_index, dst_dtype, err);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Writing                                                                                   */

static const char *st_name_of(enum weft_dtype d)
{
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == (int)d)
            return st_dtypes[i].name;
    return NULL;
}

static weft_status_t write_all(int fd, const void *p, size_t n, const char *path,
                               struct weft_error *err)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: write failed: %s", path,
                                  strerror(errno));
        c += w;
        n -= (size_t)w;
    }
    return WEFT_OK;
}

#define FILL_CHUNK ((size_t)8 << 20)

static weft_status_t fill_from_data(void *arg, size_t i, uint64_t offset, void *buf,
                                    size_t bytes)
{
    const struct weft_st_out *t = arg;
    memcpy(buf, (const char *)t[i].data + offset, bytes);
    return WEFT_OK;
}

weft_status_t weft_st_write(const char *path, size_t n, const struct weft_st_out *t,
                            size_t n_meta, const struct weft_st_meta *meta,
                            struct weft_error *err)
{
    return weft_st_write_stream(path, n, t, n_meta, meta, fill_from_data, (void *)t, err);
}

/* The header JSON of the tensors laid out in order (NULL: out of memory, or a dtype that cannot
 * be written, then recorded in err). */
static char *header_json(const char *path, size_t n, const struct weft_st_out *t, size_t n_meta,
                         const struct weft_st_meta *meta, weft_status_t *st_p,
                         struct weft_error *err)
{
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    *st_p = WEFT_ERR_NOMEM;
    if (!root)
        goto out;
    if (n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (size_t i = 0; i < n_meta; i++)
            cJSON_AddStringToObject(m, meta[i].key, meta[i].value);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dn = st_name_of(t[i].dtype);
        int64_t numel = weft_shape_numel(t[i].ndim, t[i].shape);
        if (!dn || numel < 0) {
            *st_p = weft_error_set(err, WEFT_ERR_INVALID, "safetensors",
                                   "%s: tensor '%s': cannot write dtype %s", path, t[i].name,
                                   weft_dtype_name(t[i].dtype));
            goto out;
        }
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", dn);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        uint64_t bytes = (uint64_t)numel * weft_dtype_size(t[i].dtype);
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    json = cJSON_PrintUnformatted(root);
    if (json)
        *st_p = WEFT_OK;
out:
    if (*st_p == WEFT_ERR_NOMEM)
        weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    cJSON_Delete(root);
    return json;
}

weft_status_t weft_st_write_stream(const char *path, size_t n, const struct weft_st_out *t,
                                   size_t n_meta, const struct weft_st_meta *meta,
                                   weft_st_fill_cb fill, void *fill_arg, struct weft_error *err)
{
    weft_status_t st;
    char *tmp = NULL;
    void *chunk = NULL;
    int fd = -1;
    char *json = header_json(path, n, t, n_meta, meta, &st, err);
    if (!json)
        return st;
    size_t plen = strlen(path) + 16;
    if (!(tmp = weft_malloc(plen))) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    snprintf(tmp, plen, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: cannot create: %s", tmp,
                            strerror(errno));
        goto out;
    }
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if ((st = write_all(fd, le, 8, tmp, err)) || (st = write_all(fd, json, jlen, tmp, err)) ||
        (st = write_all(fd, spaces, padded - jlen, tmp, err)))
        goto out;
    if (!fill) { /* a hole as long as the data */
        uint64_t total = 8 + padded;
        for (size_t i = 0; i < n; i++)
            total += (uint64_t)weft_shape_numel(t[i].ndim, t[i].shape) * weft_dtype_size(t[i].dtype);
        if (ftruncate(fd, (off_t)total) != 0)
            st = weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: cannot extend to %llu "
                                "bytes: %s", tmp, (unsigned long long)total, strerror(errno));
    } else if (!(chunk = weft_big_alloc(FILL_CHUNK))) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; fill && i < n && st == WEFT_OK; i++) {
        uint64_t bytes = (uint64_t)weft_shape_numel(t[i].ndim, t[i].shape) *
                         weft_dtype_size(t[i].dtype);
        for (uint64_t o = 0; o < bytes && st == WEFT_OK; o += FILL_CHUNK) {
            size_t k = bytes - o < FILL_CHUNK ? (size_t)(bytes - o) : FILL_CHUNK;
            /* the producer is the caller's: it reports its own failure */
            if ((st = fill(fill_arg, i, o, chunk, k)) != WEFT_OK)
                weft_error_refuse(err, st, "%s: tensor '%s': %s", path, t[i].name,
                                  weft_status_str(st));
            else
                st = write_all(fd, chunk, k, tmp, err);
        }
    }
    if (st == WEFT_OK && fsync(fd) != 0)
        st = weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: fsync failed: %s", tmp,
                            strerror(errno));
    if (close(fd) != 0 && st == WEFT_OK)
        st = weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: close failed: %s", tmp,
                            strerror(errno));
    fd = -1;
    if (st == WEFT_OK && rename(tmp, path) != 0)
        st = weft_error_set(err, WEFT_ERR_IO, "safetensors", "%s: cannot rename into place: %s",
                            path, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    if (st != WEFT_OK && tmp)
        unlink(tmp);
    weft_free(tmp);
    weft_big_free(chunk, FILL_CHUNK);
    cJSON_free(json);
    return st;
}
