/* Progress bar: "label [#####.....] 3/28 1.21 s/step", redrawn in place. */
#include "cli/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double weft_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void weft_progress_begin(struct weft_progress *p, const char *label)
{
    p->tty = isatty(STDERR_FILENO);
    p->start = weft_now();
    p->label = label;
}

void weft_progress_update(struct weft_progress *p, int done, int total)
{
    if (!p->tty || total <= 0)
        return;
    char bar[31];
    int fill = done * 30 / total;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    double per = done ? (weft_now() - p->start) / done : 0.0;
    fprintf(stderr, "\r%s [%s] %d/%d %.2f s/step", p->label, bar, done, total, per);
    (void)fflush(stderr);
}

void weft_progress_end(struct weft_progress *p)
{
    if (p->tty)
        fprintf(stderr, "\n");
}
