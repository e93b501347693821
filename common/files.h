/* Small file-system helpers (the coordinator's journal and jobs, the runners' images): folders,
 * durable writes, whole-file reads. All log the exact cause (path and errno text) on failure,
 * once; those that take err record it there too. */
#ifndef WEFT_COMMON_FILES_H
#define WEFT_COMMON_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "common/error.h"

/* mkdir -p with mode 0700 for the folders it creates. */
weft_status_t weft_files_mkdirs(const char *path, struct weft_error *err);
/* fsync a file (its bytes are on disk when this returns). */
weft_status_t weft_files_sync_file(const char *path);
/* fsync a folder, so that a rename or a new entry in it is durable. */
weft_status_t weft_files_sync_dir(const char *path);
/* Remove a folder and the files in it (one level: a job's folder). Missing is fine. */
weft_status_t weft_files_remove_dir(const char *path);
/* Write len bytes to path atomically and durably: a temporary file beside it, fsync, rename,
 * fsync of the folder. */
weft_status_t weft_files_save(const char *path, const void *data, size_t len,
                              struct weft_error *err);
/* weft_files_save with no err (the cause is only logged), for callers that report nothing
 * further. */
weft_status_t weft_files_write(const char *path, const void *data, size_t len);
/* Whole file into a new buffer (+ NUL; caller frees with weft_free); files over max_bytes are
 * refused with WEFT_ERR_RANGE. WEFT_ERR_NOT_FOUND (not logged) when it does not exist. */
weft_status_t weft_files_read(const char *path, size_t max_bytes, char **data_p, size_t *len_p);

/* Open path for reading if it is a regular file: a FIFO, a device or a folder is refused at
 * once (open(2) of a FIFO blocks until a writer comes; a device reads without end). Returns
 * the descriptor (O_CLOEXEC, blocking), or -1 with errno set: ENOENT and the other open(2)
 * errors, EISDIR for a folder, ENXIO for anything else that is not a regular file. */
int weft_files_open_regular(const char *path);
/* The same as a stdio stream (mode "r" or "rb"); NULL with errno as above. */
FILE *weft_files_fopen_regular(const char *path);
/* The text for errno after the two above ("not a regular file" for ENXIO). */
const char *weft_files_open_error(int e);

#endif
