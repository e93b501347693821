/* The CUDA backend's cuBLASLt is opened when a backend starts, not linked: in a CUDA build the
 * library and every function the backend calls resolve (no GPU needed), and a weft process
 * that never touches a GPU stays small (weft --version peaked at 218 MB resident with
 * cuBLASLt linked; the bound here is 64 MiB). */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#if WEFT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    (void)argv; /* a sanitizer build without CUDA checks nothing here */
#if defined(__SANITIZE_ADDRESS__)
    printf("sanitizer build: the resident-memory bound is not checked\n");
#else
    fflush(stdout);
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(126);
        execl(argv[1], argv[1], "--version", (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    CHECK_EQ(wait4(pid, &status, 0, &ru), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("weft --version: peak resident memory %.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
    CHECK(ru.ru_maxrss < 64 * 1024);
#endif
    /* after the child: a fork copies what this process has touched into the child's peak */
#if WEFT_HAVE_CUDA
    char why[256] = "";
    CHECK_OK(weft_cuda_blaslt_probe(why, sizeof(why)));
    printf("cuBLASLt opened at run time, every function the backend calls resolved\n");
#endif
    return 0;
}
