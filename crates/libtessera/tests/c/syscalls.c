/* What N interval_start + interval_finish pairs cost in system calls:
 * run under `strace -c` (which, without -f, traces only this main thread)
 * with N = 0 and with N > 0; the difference is the pairs'.
 * Run: ./syscalls NAME N                                                 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <tessera.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME N\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    tessera_workgroup *wg = tessera_workgroup_open(argv[1]);
    if (wg == NULL) {
        fprintf(stderr, "open: %s\n", tessera_strerror(tessera_last_error()));
        return 1;
    }
    tessera_join_token token;
    int joined = tessera_workgroup_join(wg, &token);
    if (joined < 0) {
        fprintf(stderr, "join: %s\n", tessera_strerror(joined));
        return 1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the vDSO's: no system call */
    uint64_t start = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    for (long i = 0; i < n; i++) {
        tessera_workgroup_interval_start(wg, start, start + 1000000000ULL);
        tessera_workgroup_interval_finish(wg);
    }
    tessera_workgroup_leave(wg, &token);
    return tessera_workgroup_close(wg) < 0;
}
