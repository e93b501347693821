/* Progress of a job on stderr: a bar redrawn in place on a terminal ("label [#####.....]
 * 12/28 steps  0:03 elapsed  ETA 0:05"), one plain line every few seconds otherwise (logs,
 * CI), or nothing. --progress=auto|bar|plain|none chooses; auto is bar on a terminal, plain
 * otherwise. */
#ifndef WEFT_CLI_PROGRESS_H
#define WEFT_CLI_PROGRESS_H

#include <stdbool.h>

enum weft_progress_mode {
    WEFT_PROGRESS_AUTO,
    WEFT_PROGRESS_BAR,
    WEFT_PROGRESS_PLAIN,
    WEFT_PROGRESS_NONE,
};

#define WEFT_PROGRESS_PLAIN_EVERY 5.0 /* seconds between two plain lines */

struct weft_progress {
    bool tty;
    enum weft_progress_mode mode; /* resolved: never AUTO after begin */
    double start, last_line;
    const char *label;
    int last_done;
    bool drawn;
};

/* "auto", "bar", "plain", "none"; -1 for anything else. */
int weft_progress_mode_parse(const char *v);
void weft_progress_begin(struct weft_progress *p, const char *label);
void weft_progress_begin_mode(struct weft_progress *p, const char *label,
                              enum weft_progress_mode mode);
/* done of total steps; elapsed and eta in seconds when known (else < 0: from the local clock). */
void weft_progress_update(struct weft_progress *p, int done, int total);
void weft_progress_update_eta(struct weft_progress *p, int done, int total, double elapsed,
                              double eta);
/* A one-line note ("queued, 2 ahead") in place of the bar. */
void weft_progress_note(struct weft_progress *p, const char *text);
void weft_progress_end(struct weft_progress *p);
double weft_now(void);

#endif
