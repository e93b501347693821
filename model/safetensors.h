/* safetensors: a validating reader with sliced reads.
 *
 * The header is fully validated before anything in it is trusted (length bound, UTF-8, JSON
 * shape, dtypes, shapes without overflow, offsets sorted/contiguous/in bounds, sizes matching
 * numel x element size, the buffer ending exactly at the end of the file, no duplicate names).
 * Reads use pread(2) into caller buffers and touch only the bytes asked for: a whole tensor, a
 * set of ranges along dim 0 (contiguous byte ranges) or along dim 1 (strided runs), which is how
 * tensor-parallel ranks read their shards, packed blocks included. */
#ifndef WEFT_MODEL_SAFETENSORS_H
#define WEFT_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/status.h"

#define WEFT_ST_MAX_HEADER 100000000ull
#define WEFT_ST_MAX_DIMS 8

struct weft_st_tensor {
    const char *name;
    const char *dtype_name; /* as in the file: "BF16", "F8_E4M3", ... */
    int dtype;              /* enum weft_dtype, or -1 when weft cannot read it as numbers */
    unsigned bits;          /* bits per element */
    int ndim;
    int64_t shape[WEFT_ST_MAX_DIMS];
    int64_t numel;
    uint64_t offset; /* absolute byte offset in the file */
    uint64_t nbytes;
};

struct weft_st_meta {
    const char *key;
    const char *value;
};

/* A half-open range [begin, end) of indices along one dimension. */
struct weft_range {
    int64_t begin;
    int64_t end;
};

struct weft_st_file;

/* Open and validate. The cause (naming the file, the tensor and the reason) goes to err: a file
 * that is missing or breaks the format is its owner's fault, recorded without logging above
 * DEBUG; with NULL err it is logged at ERROR. Every function here that takes err does the same,
 * and logs a read or write that fails on the system's side (an I/O error) at ERROR as well. */
weft_status_t weft_st_open(const char *path, struct weft_st_file **file_p,
                           struct weft_error *err);
/* Validate a whole file image held in memory (a request's inline embeddings, the fuzz target;
 * reads then copy from data). With err, the cause is recorded there and not logged above DEBUG
 * (the image is someone else's); with NULL it is logged as weft_st_open's. */
weft_status_t weft_st_open_memory(const char *name, const void *data, size_t size,
                                  struct weft_st_file **file_p, struct weft_error *err);
void weft_st_close(struct weft_st_file *file);

const char *weft_st_path(const struct weft_st_file *file);
size_t weft_st_count(const struct weft_st_file *file);
/* Tensors in file (offset) order. */
const struct weft_st_tensor *weft_st_at(const struct weft_st_file *file, size_t i);
const struct weft_st_tensor *weft_st_find(const struct weft_st_file *file, const char *name);
size_t weft_st_meta_count(const struct weft_st_file *file);
const struct weft_st_meta *weft_st_meta_at(const struct weft_st_file *file, size_t i);
uint64_t weft_st_file_size(const struct weft_st_file *file);

/* Whole tensor into dst (numel elements of dst_dtype). Converts between f32, bf16 and f16;
 * other file dtypes can only be read raw (dst_dtype equal to the file's). */
weft_status_t weft_st_read(struct weft_st_file *file, const struct weft_st_tensor *t, void *dst,
                           enum weft_dtype dst_dtype, struct weft_error *err);
/* The concatenation along dim (0 or 1) of the given index ranges of t, into dst, row-major:
 * the result has t's shape with dim replaced by the sum of the range lengths. */
weft_status_t weft_st_read_ranges(struct weft_st_file *file, const struct weft_st_tensor *t,
                                  int dim, size_t n_ranges, const struct weft_range *ranges,
                                  void *dst, enum weft_dtype dst_dtype, struct weft_error *err);

/* Writing: tensors laid out in the given order; the file is written beside the target and
 * renamed into place, so a reader never sees half a file. */
struct weft_st_out {
    const char *name;
    enum weft_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
};
weft_status_t weft_st_write(const char *path, size_t n, const struct weft_st_out *tensors,
                            size_t n_meta, const struct weft_st_meta *meta,
                            struct weft_error *err);
/* Streaming form for files larger than memory: tensors[i].data is ignored and fill(arg, i,
 * buf, bytes) produces each tensor's bytes in turn (buf holds up to chunk bytes; a tensor is
 * filled in consecutive calls, offset tells where in the tensor this piece starts). fill logs
 * its own failure; err then gets its status. fill NULL: the data is left a hole (a sparse
 * file that reads as zeros: checkpoints for memory and planning benchmarks). */
typedef weft_status_t (*weft_st_fill_cb)(void *arg, size_t i, uint64_t offset, void *buf,
                                         size_t bytes);
weft_status_t weft_st_write_stream(const char *path, size_t n, const struct weft_st_out *tensors,
                                   size_t n_meta, const struct weft_st_meta *meta,
                                   weft_st_fill_cb fill, void *arg, struct weft_error *err);

/* Bytes requested from the file by reads so far (the header excluded). */
uint64_t weft_st_bytes_read(const struct weft_st_file *file);

#endif
