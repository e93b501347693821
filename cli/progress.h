/* A progress bar on stderr when it is a terminal (nothing otherwise). */
#ifndef WEFT_CLI_PROGRESS_H
#define WEFT_CLI_PROGRESS_H

#include <stdbool.h>

struct weft_progress {
    bool tty;
    double start;
    const char *label;
};

void weft_progress_begin(struct weft_progress *p, const char *label);
void weft_progress_update(struct weft_progress *p, int done, int total);
void weft_progress_end(struct weft_progress *p);
double weft_now(void);

#endif
