/* A host's audio cycle in a workgroup: the callback thread and one worker
 * join the workgroup NAME (created if it does not exist, or the audio
 * server's), mark CYCLES cycles of 2.67 ms (128 frames at 48 kHz), and
 * leave.  Build: cc host.c $(pkg-config --cflags --libs tessera) -lpthread
 * Run:   ./host NAME CYCLES [WORKERS]   (WORKERS: 1 unless given)        */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <tessera.h>

#define PERIOD_NS 2666666ULL

static tessera_workgroup *wg;
static int cycles;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The plug-ins' work of one cycle: about `ns` of CPU. */
static void process(uint64_t ns) {
    uint64_t end = now_ns() + ns;
    volatile double x = 1.0;
    while (now_ns() < end) x = x * 1.000001 + 0.5;
}

static void sleep_until(uint64_t t) {
    struct timespec ts = { (time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL) };
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* One member: join, mark each cycle, leave. */
static int run_member(uint64_t work_ns) {
    tessera_join_token token;
    int rc = tessera_workgroup_join(wg, &token);
    if (rc < 0) {
        fprintf(stderr, "join: %s\n", tessera_strerror(rc));
        return rc;
    }
    uint64_t start = now_ns();
    for (int i = 0; i < cycles; i++) {
        uint64_t deadline = start + PERIOD_NS;
        tessera_workgroup_interval_start(wg, start, deadline);
        process(work_ns);
        rc = tessera_workgroup_interval_finish(wg);
        if (rc < 0) {
            fprintf(stderr, "finish: %s\n", tessera_strerror(rc));
            break;
        }
        sleep_until(deadline);
        start = deadline;
    }
    /* The library's control thread takes the last cycles in within ms. */
    sleep_until(now_ns() + 20000000ULL);
    tessera_member_stats s;
    if (tessera_workgroup_member_stats(wg, gettid(), &s) == TESSERA_OK)
        printf("member %d: %llu cycles, %llu overruns, %llu misses, budget %llu of %llu ns\n",
               (int)gettid(), (unsigned long long)s.cycles, (unsigned long long)s.overruns,
               (unsigned long long)s.misses, (unsigned long long)s.budget_ns,
               (unsigned long long)s.period_ns);
    int left = tessera_workgroup_leave(wg, &token);
    return rc < 0 ? rc : left;
}

static void *worker(void *arg) {
    (void)arg;
    return (void *)(intptr_t)run_member(300000);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s NAME CYCLES [WORKERS]\n", argv[0]);
        return 2;
    }
    cycles = atoi(argv[2]);
    wg = tessera_workgroup_open(argv[1]);
    if (wg == NULL) {
        fprintf(stderr, "open %s: %s\n", argv[1], tessera_strerror(tessera_last_error()));
        return 1;
    }
    printf("guaranteed %d, max parallel threads %d\n",
           tessera_workgroup_guaranteed(wg), tessera_workgroup_max_parallel_threads(wg));
    fflush(stdout);
    pthread_t t[8];
    int workers = argc == 4 ? atoi(argv[3]) : 1;
    if (workers > 8) workers = 8;
    for (int i = 0; i < workers; i++) pthread_create(&t[i], NULL, worker, NULL);
    int rc = run_member(500000);
    for (int i = 0; i < workers; i++) {
        void *worker_rc = NULL;
        pthread_join(t[i], &worker_rc);
        if (rc == 0) rc = (int)(intptr_t)worker_rc;
    }
    printf("members done: %s\n", tessera_strerror(rc));
    int closed = tessera_workgroup_close(wg);
    return rc < 0 || closed < 0 ? 1 : 0;
}
