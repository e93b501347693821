/* What the commands that start other processes share (weft run, the benchmarks): a child with
 * its stdout on a pipe (and its stdin, for a child that serves requests line by line), this
 * binary's path, an edited environment and a temporary folder's removal. */
#ifndef WEFT_CLI_CHILD_H
#define WEFT_CLI_CHILD_H

#include <stddef.h>
#include <sys/types.h>

struct weft_child {
    pid_t pid;
    int out_fd; /* the read end of its stdout */
    int in_fd;  /* the write end of its stdin (weft_child_start_duplex), else -1 */
};

/* Start argv[0] (a path, or a name looked up in PATH) with envp, its stdout on a pipe.
 * Returns 0, or -1 (nothing left running). */
int weft_child_start(char *const argv[], char *const envp[], struct weft_child *c);
/* The same with its stdin on a pipe too: a child that answers one line of stdout per line of
 * stdin (a benchmark's side kept loaded between rounds). SIGPIPE is ignored from then on in
 * this process (the child gets the default back), so that writing to a child that died fails
 * instead of killing the caller. */
int weft_child_start_duplex(char *const argv[], char *const envp[], struct weft_child *c);
/* Its next line of stdout (without the newline) into out, within timeout_s: 0, or -1 when it
 * closed its stdout, took longer or wrote a line of len bytes or more. */
int weft_child_read_line(struct weft_child *c, char *out, size_t len, double timeout_s);
/* Write line and a newline to its stdin (line NULL: nothing), then weft_child_read_line. */
int weft_child_ask(struct weft_child *c, const char *line, char *out, size_t len,
                   double timeout_s);
/* A pause (100 ms) before asking a kept-loaded child for a timed request when another child
 * answered last: that one's BLAS threads spin for some milliseconds after their work (up to
 * 30 ms measured here) and would steal a core from the start of the next timing. */
void weft_child_settle(void);
/* weft_child_ask, its answer parsed as JSON (cJSON_Delete it); NULL when there was none, or
 * when it was not JSON or held "error" (logged with what the child said). */
struct cJSON *weft_child_ask_json(struct weft_child *c, const char *line, double timeout_s);
/* Close its stdin (duplex: the end of its requests), read its stdout into out (NUL-ended, cut
 * at len - 1 bytes), wait for it, and give its peak RSS in KiB when maxrss_kib is not NULL. Returns its exit status, -1 when a signal ended it. */
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

#endif
