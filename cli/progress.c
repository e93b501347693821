/* Progress on stderr (progress.h). */
#include "cli/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double weft_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int weft_progress_mode_parse(const char *v)
{
    static const char *const names[] = {"auto", "bar", "plain", "none"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -1;
}

void weft_progress_begin_mode(struct weft_progress *p, const char *label,
                              enum weft_progress_mode mode)
{
    *p = (struct weft_progress){.tty = isatty(STDERR_FILENO), .label = label, .last_done = -1};
    p->mode = mode != WEFT_PROGRESS_AUTO ? mode : p->tty ? WEFT_PROGRESS_BAR : WEFT_PROGRESS_PLAIN;
    p->start = weft_now();
}

void weft_progress_begin(struct weft_progress *p, const char *label)
{
    weft_progress_begin_mode(p, label, WEFT_PROGRESS_AUTO);
}

/* "m:ss" (or "h:mm:ss"). */
static void clock_text(double s, char *out, size_t len)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, len, "%ld:%02ld", t / 60, t % 60);
}

void weft_progress_update_eta(struct weft_progress *p, int done, int total, double elapsed,
                              double eta)
{
    if (p->mode == WEFT_PROGRESS_NONE || total <= 0)
        return;
    double now = weft_now();
    if (elapsed < 0)
        elapsed = now - p->start;
    if (eta < 0 && done > 0)
        eta = elapsed / done * (total - done);
    char el[24], et[24] = "?";
    clock_text(elapsed, el, sizeof(el));
    if (eta >= 0)
        clock_text(eta, et, sizeof(et));
    if (p->mode == WEFT_PROGRESS_PLAIN) {
        /* one line every few seconds, and the last step */
        bool soon = now - p->last_line < WEFT_PROGRESS_PLAIN_EVERY;
        if (done == p->last_done || (done < total && soon && p->last_done >= 0))
            return;
        fprintf(stderr, "%s: step %d/%d (%d%%), %s elapsed, ETA %s\n", p->label, done, total,
                done * 100 / total, el, et);
        p->last_line = now;
        p->last_done = done;
        return;
    }
    char bar[31];
    int fill = done * 30 / total;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r\033[K%s [%s] %d/%d steps  %s elapsed  ETA %s", p->label, bar, done,
            total, el, et);
    (void)fflush(stderr);
    p->drawn = true;
    p->last_done = done;
}

void weft_progress_update(struct weft_progress *p, int done, int total)
{
    weft_progress_update_eta(p, done, total, -1, -1);
}

void weft_progress_note(struct weft_progress *p, const char *text)
{
    if (p->mode == WEFT_PROGRESS_BAR) {
        fprintf(stderr, "\r\033[K%s: %s", p->label, text);
        p->drawn = true;
    } else if (p->mode == WEFT_PROGRESS_PLAIN) {
        fprintf(stderr, "%s: %s\n", p->label, text);
    }
    (void)fflush(stderr);
}

void weft_progress_end(struct weft_progress *p)
{
    if (p->mode == WEFT_PROGRESS_BAR && p->drawn)
        fprintf(stderr, "\n");
    p->drawn = false;
}
