/* The README's first command, end to end: the `build/weft ...` part of its first shell line
 * (today `weft run`: a local cluster of workers) is taken from README.md itself (so the two
 * cannot drift apart), run with the weft binary of this build in a fresh, empty directory
 * (nothing left by other tests can help it) and the environment a newcomer has (the test
 * suites' WEFT_MODEL_PATH removed: the embedded default model), and what it writes must be a
 * PNG of the size the command asks for (the model's default when it does not say): the
 * signature, IHDR's width and height, a full decode by libspng, and a picture of what its prompt
 * asks for, judged as the picture suite judges (tests/picture/judge.h).
 *
 * usage: test_readme_generate /path/to/build/weft */
#include <errno.h>
#include <spawn.h>
#include <spng.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "picture/judge.h"
#include "test.h"

extern char **environ;

#define MAX_ARGS 64

/* The first line of README.md containing "build/weft ": its words after "build/weft" up to the
 * end of the command (a '#' comment, "&&", ";" or the end of the line); a word in double quotes
 * is one word. */
static int readme_command(char *line, size_t len, char **args)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/README.md", getenv("WEFT_SOURCE_ROOT"));
    FILE *f = fopen(path, "r");
    CHECK(f);
    char *hit = NULL;
    while (fgets(line, (int)len, f))
        if ((hit = strstr(line, "build/weft ")))
            break;
    CHECK(fclose(f) == 0);
    if (!hit) {
        fprintf(stderr, "README.md has no `build/weft` command\n");
        exit(1);
    }
    int n = 0;
    char *p = hit + strlen("build/weft");
    while (n < MAX_ARGS - 1) {
        p += strspn(p, " \t\r\n");
        if (!*p || *p == '#' || strncmp(p, "&&", 2) == 0 || *p == ';')
            break;
        char *end;
        if (*p == '"') {
            end = strchr(++p, '"');
            CHECK(end); /* an unterminated quote in the README */
        } else {
            end = p + strcspn(p, " \t\r\n");
        }
        const bool last = !*end;
        *end = '\0';
        args[n++] = p;
        if (last)
            break;
        p = end + 1;
    }
    args[n] = NULL;
    return n;
}

static const char *arg_value(char **args, int n, const char *name)
{
    for (int i = 0; i + 1 < n; i++)
        if (strcmp(args[i], name) == 0)
            return args[i + 1];
    return NULL;
}

static void check_png(const char *path, uint32_t want_w, uint32_t want_h)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s was not written: %s\n", path, strerror(errno));
        exit(1);
    }
    uint8_t head[24];
    CHECK(fread(head, 1, sizeof(head), f) == sizeof(head));
    CHECK(memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0);
    CHECK(memcmp(head + 12, "IHDR", 4) == 0);
    uint32_t w = (uint32_t)head[16] << 24 | (uint32_t)head[17] << 16 | head[18] << 8 | head[19];
    uint32_t h = (uint32_t)head[20] << 24 | (uint32_t)head[21] << 16 | head[22] << 8 | head[23];
    printf("%s: PNG %ux%u\n", path, w, h);
    CHECK_EQ(w, want_w);
    CHECK_EQ(h, want_h);
    rewind(f);
    spng_ctx *ctx = spng_ctx_new(0);
    CHECK(ctx);
    CHECK(spng_set_png_file(ctx, f) == 0);
    size_t size;
    CHECK(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size) == 0);
    CHECK_EQ(size, (size_t)w * h * 3);
    uint8_t *px = malloc(size);
    CHECK(px);
    int rc = spng_decode_image(ctx, px, size, SPNG_FMT_RGB8, 0);
    if (rc) {
        fprintf(stderr, "%s: libspng: %s\n", path, spng_strerror(rc));
        exit(1);
    }
    size_t same = 0;
    for (size_t i = 3; i < size; i++)
        same += px[i] == px[i % 3];
    CHECK(same < size / 2); /* an image, not a flat fill */
    spng_ctx_free(ctx);
    free(px);
    CHECK(fclose(f) == 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    load_prompts("prompts.json");
    char line[4096], *args[MAX_ARGS], bin[4096];
    int n = readme_command(line, sizeof(line), args + 1);
    CHECK(realpath(argv[1], bin)); /* it runs in another directory */
    args[0] = bin;
    const char *out = arg_value(args, n + 1, "--out");
    const char *w = arg_value(args, n + 1, "--width"), *h = arg_value(args, n + 1, "--height");
    const char *prompt = arg_value(args, n + 1, "--prompt");
    CHECK(out && prompt);
    printf("running:");
    for (int i = 0; i <= n; i++)
        printf(strchr(args[i], ' ') ? " \"%s\"" : " %s", args[i]);
    printf("\n");
    /* a newcomer's environment: no test suite's model */
    char *env[512];
    int ne = 0;
    for (char **e = environ; *e && ne < 511; e++)
        if (strncmp(*e, "WEFT_MODEL_PATH=", 16) != 0)
            env[ne++] = *e;
    env[ne] = NULL;

    char dir[256];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof(dir), "%s/weft_readme_XXXXXX", tmp);
    CHECK(mkdtemp(dir));
    CHECK(chdir(dir) == 0);
    pid_t pid;
    CHECK(posix_spawn(&pid, bin, NULL, NULL, args, env) == 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "weft exited with status %d\n", status);
        exit(1);
    }
    check_png(out, w ? (uint32_t)atoi(w) : (uint32_t)pic_side,
              h ? (uint32_t)atoi(h) : (uint32_t)pic_side);
    struct want want;
    CHECK(want_of_caption(prompt, &want));
    struct weft_png_image im;
    CHECK_OK(weft_png_read(out, &im, TERR));
    char why[200] = "";
    const bool ok = judge(&im, &want, why, sizeof(why));
    printf("%s: a %s shape on a %s background? %s%s\n", out, pal.name[want.s[0].colour],
           pal.name[want.bg], ok ? "yes" : "no: ", why);
    CHECK(ok);
    weft_png_image_cleanup(&im);
    CHECK(remove(out) == 0);
    CHECK(chdir("/") == 0);
    CHECK(rmdir(dir) == 0);
    return 0;
}
