/* What the commands that start other processes share (weft run, the benchmarks): a child with
 * its stdout on a pipe, this binary's path, an edited environment, a temporary folder's removal
 * and a median of repeated timings. */
#ifndef WEFT_CLI_CHILD_H
#define WEFT_CLI_CHILD_H

#include <stddef.h>
#include <sys/types.h>

struct weft_child {
    pid_t pid;
    int out_fd; /* the read end of its stdout */
};

/* Start argv[0] (a path, or a name looked up in PATH) with envp, its stdout on a pipe.
 * Returns 0, or -1 (nothing left running). */
int weft_child_start(char *const argv[], char *const envp[], struct weft_child *c);
/* Read its stdout into out (NUL-ended, cut at len - 1 bytes), wait for it, and give its peak
 * RSS in KiB when maxrss_kib is not NULL. Returns its exit status, -1 when a signal ended it. */
int weft_child_finish(struct weft_child *c, char *out, size_t len, long *maxrss_kib);
/* Both; -1 when it could not start. */
int weft_child_run(char *const argv[], char *const envp[], char *out, size_t len,
                   long *maxrss_kib);

/* The path of this weft binary (children that are weft too); -1 when unknown. */
int weft_self_path(char *buf, size_t len);

/* environ without the variables that start with drop ("NAME=", or NULL: none), with add
 * appended (or NULL). The strings are environ's and add itself; weft_free the array. */
char **weft_env_edit(const char *drop, const char *add);

/* Remove a folder and everything in it (no shell); a warning names what could not go. */
void weft_remove_tree(const char *dir);

/* The median of v[0..n) (sorted in place); 0 for none. */
double weft_median(double *v, int n);

#endif
