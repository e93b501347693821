/* The Open MPI side of `weft bench comm`: the same collective through MPI, timed the same way.
 *
 * usage: mpirun -np N weft-bench-mpi OP ITERS BYTES...   (OP: allreduce, allgather, alltoall)
 * For each size rank 0 prints "bytes microseconds-per-call" (the slowest rank's mean over ITERS
 * calls after 2 warm-up calls). Buffers are malloc'ed and touched once, as an application would;
 * whatever MPI allocates inside the call is its own business (see bench/README.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(const char *op, const float *send, float *recv, size_t bytes, int n)
{
    if (strcmp(op, "allreduce") == 0)
        return MPI_Allreduce(send, recv, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int per = (int)(bytes / 4 / (size_t)n);
    if (strcmp(op, "allgather") == 0)
        return MPI_Allgather(send, per, MPI_FLOAT, recv, per, MPI_FLOAT, MPI_COMM_WORLD);
    return MPI_Alltoall(send, per, MPI_FLOAT, recv, per, MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: %s allreduce|allgather|alltoall ITERS BYTES...\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *op = argv[1];
    int iters = atoi(argv[2]);
    for (int a = 3; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10);
        int each = iters;
        if (each < 1)
            each = 1;
        float *send = malloc(bytes ? bytes : 4), *recv = malloc(bytes ? bytes : 4);
        if (!send || !recv)
            MPI_Abort(MPI_COMM_WORLD, 1);
        for (size_t i = 0; i < bytes / 4; i++)
            send[i] = (float)(i % 1000);
        memset(recv, 0, bytes);
        int rc = MPI_SUCCESS;
        for (int w = 0; w < 2 && rc == MPI_SUCCESS; w++)
            rc = run(op, send, recv, bytes, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < each && rc == MPI_SUCCESS; i++)
            rc = run(op, send, recv, bytes, n);
        double mine = (MPI_Wtime() - t0) / each, slowest = 0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%zu %.3f\n", bytes, rc == MPI_SUCCESS ? slowest * 1e6 : -1.0);
        fflush(stdout);
        free(send);
        free(recv);
    }
    MPI_Finalize();
    return 0;
}
