/* The host of `tessera bench workgroup`: one audio callback thread and
 * three workers processing a synthetic plug-in chain (two plug-ins per
 * thread, busy for their share of the chain's CPU time), whose work steps
 * between LOW % and HIGH % of the period every STEP seconds, on a cycle
 * grid of PERIOD_NS from T0_NS (CLOCK_MONOTONIC).  Its threads are
 * SCHED_FIFO at PRIORITY, as hosts make them; with MODE "workgroup" each
 * joins workgroup NAME (created for the four) and marks each cycle.
 *
 * Each thread records every cycle; when the run ends the records go to
 * OUT, tab-separated, after `#` lines (the bench's cycles.rs reads them):
 *   # tessera-workgroup-host 1
 *   # mode workgroup
 *   # joined 0 0 0 0              (each thread's join code; fifo: none)
 *   thread cycle start_ns end_ns deadline_ns demand_ns cpu_ns budget_ns budget_period_ns call_ns
 * thread 0 is the callback: its end is the cycle's (all workers done) and
 * a cycle it could not start before its deadline has cpu_ns 0 and end_ns
 * 0 (skipped); cpu_ns is all the CPU time the thread used for the cycle,
 * from the end of its previous one — the plug-ins, the wake-ups, the
 * semaphores and calls around them: what its reservation pays; budget_*
 * are the thread's SCHED_DEADLINE runtime and period after the cycle (0:
 * not reserved); call_ns is interval_start plus interval_finish, timed
 * around the calls (0 without a workgroup).
 *
 * Run: ./host MODE NAME PRIORITY PERIOD_NS T0_NS SECONDS STEP_S LOW_PCT HIGH_PCT OUT */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <tessera.h>

#define THREADS 4
#define PLUGINS_PER_THREAD 2
#define SCHED_DEADLINE_POLICY 6

struct row {
    uint64_t start, end, deadline, demand, cpu, budget, budget_period, call;
};

/* The sched_attr of sched_getattr(2), which glibc does not declare. */
struct attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

static tessera_workgroup *wg;
static uint64_t period, t0, step, low_pct, high_pct, cycles;
static struct row *rows[THREADS];
static int joined[THREADS];
/* Each thread's CPU clock when its last cycle ended (0: none yet). */
static uint64_t cpu_mark[THREADS];
static sem_t go[THREADS], done;
static volatile int stopping;
/* The cycle the callback hands its workers (published by sem_post). */
static uint64_t cycle_index, cycle_start, cycle_deadline, cycle_demand;

static uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t now(void) { return clock_ns(CLOCK_MONOTONIC); }

static void sleep_until(uint64_t t) {
    struct timespec ts = {(time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

/* One plug-in: busy for `ns` of this thread's CPU time. */
static void plugin(uint64_t ns) {
    uint64_t begin = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - begin < ns) {}
}

/* Each thread's share of the chain's work in cycle `start`. */
static uint64_t demand_at(uint64_t start) {
    uint64_t phase = (start - t0) / step;
    uint64_t pct = phase % 2 == 0 ? low_pct : high_pct;
    return period * pct / 100 / THREADS;
}

static void budget_of(struct row *r) {
    struct attr a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0 && a.policy == SCHED_DEADLINE_POLICY) {
        r->budget = a.runtime;
        r->budget_period = a.period;
    }
}

/* A member's part of one cycle: marked when in a workgroup. `wait` runs
 * before the finish (the callback waits for its workers there). */
static void run_part(int thread, uint64_t k, uint64_t start, uint64_t deadline, uint64_t demand,
                     void (*wait)(void)) {
    struct row *r = &rows[thread][k];
    uint64_t call = 0, c0 = 0, c1 = 0;
    int marking = wg != NULL && joined[thread] >= 0;
    if (marking) {
        c0 = now();
        tessera_workgroup_interval_start(wg, start, deadline);
        c1 = now();
        call += c1 - c0;
    }
    if (cpu_mark[thread] == 0) cpu_mark[thread] = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int p = 0; p < PLUGINS_PER_THREAD; p++) plugin(demand / PLUGINS_PER_THREAD);
    if (wait) wait();
    if (marking) {
        c0 = now();
        tessera_workgroup_interval_finish(wg);
        c1 = now();
        call += c1 - c0;
    }
    uint64_t cpu_end = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t cpu = cpu_end - cpu_mark[thread];
    cpu_mark[thread] = cpu_end;
    r->start = start;
    r->end = now();
    r->deadline = deadline;
    r->demand = demand;
    r->cpu = cpu;
    r->call = call;
}

static void wait_workers(void) {
    for (int w = 1; w < THREADS; w++)
        while (sem_wait(&done) != 0) {}
}

static void join_workgroup(int thread, tessera_join_token *token) {
    if (wg == NULL) return;
    joined[thread] = tessera_workgroup_join(wg, token);
    if (joined[thread] != TESSERA_OK)
        fprintf(stderr, "thread %d: join: %s\n", thread, tessera_strerror(joined[thread]));
}

static void leave_workgroup(int thread, tessera_join_token *token) {
    if (wg != NULL && joined[thread] >= 0) tessera_workgroup_leave(wg, token);
}

static void *callback(void *arg) {
    (void)arg;
    tessera_join_token token;
    join_workgroup(0, &token);
    for (uint64_t k = 0; k < cycles; k++) {
        uint64_t start = t0 + k * period, deadline = start + period;
        if (now() >= deadline) continue; /* skipped: its row stays zero but for its times */
        sleep_until(start);
        cycle_index = k;
        cycle_start = start;
        cycle_deadline = deadline;
        cycle_demand = demand_at(start);
        for (int w = 1; w < THREADS; w++) sem_post(&go[w]);
        run_part(0, k, start, deadline, cycle_demand, wait_workers);
        budget_of(&rows[0][k]);
    }
    stopping = 1;
    for (int w = 1; w < THREADS; w++) sem_post(&go[w]);
    leave_workgroup(0, &token);
    return NULL;
}

static void *worker(void *arg) {
    int thread = (int)(intptr_t)arg;
    tessera_join_token token;
    join_workgroup(thread, &token);
    for (;;) {
        while (sem_wait(&go[thread]) != 0) {}
        if (stopping) break;
        uint64_t k = cycle_index;
        run_part(thread, k, cycle_start, cycle_deadline, cycle_demand, NULL);
        sem_post(&done);
        budget_of(&rows[thread][k]);
    }
    leave_workgroup(thread, &token);
    return NULL;
}

static int write_rows(const char *mode, const char *path) {
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        perror(path);
        return 1;
    }
    fprintf(out, "# tessera-workgroup-host 1\n# mode %s\n# joined", mode);
    for (int t = 0; t < THREADS && wg != NULL; t++) fprintf(out, " %d", joined[t]);
    fprintf(out, "\nthread\tcycle\tstart_ns\tend_ns\tdeadline_ns\tdemand_ns\tcpu_ns\tbudget_ns"
                 "\tbudget_period_ns\tcall_ns\n");
    for (int t = 0; t < THREADS; t++)
        for (uint64_t k = 0; k < cycles; k++) {
            struct row *r = &rows[t][k];
            if (t > 0 && r->start == 0) continue; /* a worker's skipped cycle */
            uint64_t start = t0 + k * period;
            fprintf(out, "%d\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", t,
                    (unsigned long long)k, (unsigned long long)start, (unsigned long long)r->end,
                    (unsigned long long)(start + period), (unsigned long long)r->demand,
                    (unsigned long long)r->cpu, (unsigned long long)r->budget,
                    (unsigned long long)r->budget_period, (unsigned long long)r->call);
        }
    return fclose(out) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: %s MODE NAME PRIORITY PERIOD_NS T0_NS SECONDS STEP_S LOW_PCT "
                        "HIGH_PCT OUT\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int priority = atoi(argv[3]);
    period = strtoull(argv[4], NULL, 10);
    t0 = strtoull(argv[5], NULL, 10);
    uint64_t seconds = strtoull(argv[6], NULL, 10);
    step = strtoull(argv[7], NULL, 10) * 1000000000ULL;
    low_pct = strtoull(argv[8], NULL, 10);
    high_pct = strtoull(argv[9], NULL, 10);
    if (period == 0 || step == 0) {
        fprintf(stderr, "PERIOD_NS and STEP_S must be positive\n");
        return 2;
    }
    cycles = seconds * 1000000000ULL / period;
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) perror("mlockall");
    for (int t = 0; t < THREADS; t++) {
        rows[t] = calloc(cycles + 1, sizeof(struct row));
        if (rows[t] == NULL) return 1;
        sem_init(&go[t], 0, 0);
    }
    sem_init(&done, 0, 0);
    if (strcmp(mode, "workgroup") == 0) {
        wg = tessera_workgroup_open_for(argv[2], THREADS);
        if (wg == NULL) {
            fprintf(stderr, "open %s: %s\n", argv[2], tessera_strerror(tessera_last_error()));
            return 1;
        }
    } else if (strcmp(mode, "fifo") != 0) {
        fprintf(stderr, "MODE is workgroup or fifo\n");
        return 2;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
    struct sched_param param = {.sched_priority = priority};
    pthread_attr_setschedparam(&attr, &param);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        int rc = pthread_create(&threads[t], &attr, t == 0 ? callback : worker,
                                (void *)(intptr_t)t);
        if (rc != 0) {
            fprintf(stderr, "pthread_create (SCHED_FIFO %d): %s\n", priority, strerror(rc));
            return 1;
        }
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    int rc = write_rows(mode, argv[10]);
    if (wg != NULL) tessera_workgroup_close(wg);
    return rc;
}
