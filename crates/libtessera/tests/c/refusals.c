/* libtessera's refusals, each with its code: ./refusals NAME          */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <tessera.h>

static int failures;

static void expect(const char *what, int got, int want) {
    if (got != want) {
        printf("FAIL %s: got %d (%s), want %d (%s)\n", what, got, tessera_strerror(got), want,
               tessera_strerror(want));
        failures++;
    }
}

static tessera_workgroup *wg;
static int answered, release;

/* Joins, says so, holds its membership until released, leaves. */
static void *join_one(void *arg) {
    tessera_join_token token;
    int rc = tessera_workgroup_join(wg, &token);
    *(int *)arg = rc;
    __atomic_add_fetch(&answered, 1, __ATOMIC_SEQ_CST);
    struct timespec ms = {0, 1000000};
    while (!__atomic_load_n(&release, __ATOMIC_SEQ_CST)) nanosleep(&ms, NULL);
    if (rc >= 0) *(int *)arg = tessera_workgroup_leave(wg, &token);
    return NULL;
}

/* A deferred join: its code at once, then what became of it within 2 s —
 * the stats' join_code once the control thread saw it, and whether the
 * thread ended SCHED_DEADLINE — then it leaves, deferred too, and whether
 * its reservation ended within 2 s. */
struct deferred {
    int rc, join_code, deadline, left, released;
};

/* SCHED_DEADLINE (6), less the flag SCHED_RESET_ON_FORK the broker sets. */
static int on_deadline(void) { return (sched_getscheduler(0) & ~0x40000000) == 6; }

static void *join_deferred_one(void *arg) {
    struct deferred *d = arg;
    tessera_join_token token;
    d->rc = tessera_workgroup_join_deferred(wg, &token);
    tessera_member_stats stats = {0};
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 2000; i++) {
        int seen = tessera_workgroup_member_stats(wg, (int)token.opaque[0], &stats);
        d->deadline = on_deadline();
        if (seen == TESSERA_OK && (stats.join_code != TESSERA_OK || d->deadline)) break;
        nanosleep(&ms, NULL);
    }
    d->join_code = stats.join_code;
    d->left = tessera_workgroup_leave_deferred(wg, &token);
    for (int i = 0; i < 2000 && on_deadline(); i++) nanosleep(&ms, NULL);
    d->released = !on_deadline();
    return NULL;
}

/* A deferred join from a thread of its own: answered at once, reserved
 * (SCHED_DEADLINE) or not, its stats' join_code, and its leave. */
static void expect_deferred(const char *what, int reserved, int join_code) {
    struct deferred d = {0};
    pthread_t thread;
    pthread_create(&thread, NULL, join_deferred_one, &d);
    pthread_join(thread, NULL);
    printf("%s: code %d, reserved %d, join_code %d, leave %d, released %d\n", what, d.rc,
           d.deadline, d.join_code, d.left, d.released);
    expect(what, d.rc, TESSERA_OK);
    expect(what, d.deadline, reserved);
    expect(what, d.join_code, join_code);
    expect(what, d.left, TESSERA_OK);
    expect(what, d.released, 1);
}

static void wait_answers(int n) {
    struct timespec ms = {0, 1000000};
    while (__atomic_load_n(&answered, __ATOMIC_SEQ_CST) < n) nanosleep(&ms, NULL);
}

int main(int argc, char **argv) {
    tessera_join_token token;
    expect("open(NULL)", tessera_workgroup_open(NULL) == NULL ? tessera_last_error() : 0,
           TESSERA_ERR_NULL);
    expect("join(NULL)", tessera_workgroup_join(NULL, &token), TESSERA_ERR_NULL);
    expect("start(NULL)", tessera_workgroup_interval_start(NULL, 1, 2), TESSERA_ERR_NULL);
    expect("finish(NULL)", tessera_workgroup_interval_finish(NULL), TESSERA_ERR_NULL);
    expect("close(NULL)", tessera_workgroup_close(NULL), TESSERA_ERR_NULL);
    expect("max(NULL)", tessera_workgroup_max_parallel_threads(NULL), TESSERA_ERR_NULL);
    expect("open_for(name, 0)",
           tessera_workgroup_open_for("refusals-none", 0) == NULL ? tessera_last_error() : 0,
           TESSERA_ERR_INVALID);
    /* Under global EDF a workgroup holds more members than cores. */
    tessera_workgroup *wide = tessera_workgroup_open_for("refusals-wide", 65);
    expect("open_for past 64", wide == NULL ? tessera_last_error() : 0, TESSERA_ERR_INVALID);
    wide = tessera_workgroup_open_for("refusals-wide", 3);
    expect("open_for(name, 3)", wide == NULL ? tessera_last_error() : 0, TESSERA_OK);
    if (wide != NULL) {
        expect("capacity of open_for", tessera_workgroup_max_parallel_threads(wide), 3);
        expect("close open_for", tessera_workgroup_close(wide), TESSERA_OK);
    }
    /* On one core: a core that is not online, or none, is refused. */
    expect("open_on(name, 2, 4096)",
           tessera_workgroup_open_on("refusals-core", 2, 4096) == NULL ? tessera_last_error() : 0,
           TESSERA_ERR_INVALID);
    expect("open_on(name, 2, -1)",
           tessera_workgroup_open_on("refusals-core", 2, -1) == NULL ? tessera_last_error() : 0,
           TESSERA_ERR_INVALID);

    wg = tessera_workgroup_open(argc > 1 ? argv[1] : "refusals");
    if (wg == NULL) {
        printf("FAIL open: %s\n", tessera_strerror(tessera_last_error()));
        return 1;
    }
    expect("join(wg, NULL)", tessera_workgroup_join(wg, NULL), TESSERA_ERR_NULL);
    expect("start before join", tessera_workgroup_interval_start(wg, 1, 2), TESSERA_ERR_NOT_JOINED);
    expect("report before join", tessera_hint_report_actual_work_duration(wg, 5),
           TESSERA_ERR_NOT_JOINED);
    expect("join", tessera_workgroup_join(wg, &token), TESSERA_OK);
    expect("join twice", tessera_workgroup_join(wg, &token), TESSERA_ERR_ALREADY_JOINED);
    expect("finish without start", tessera_workgroup_interval_finish(wg), TESSERA_ERR_NO_INTERVAL);
    expect("deadline before start", tessera_workgroup_interval_start(wg, 10, 5),
           TESSERA_ERR_INVALID);
    expect("report without target", tessera_hint_report_actual_work_duration(wg, 5),
           TESSERA_ERR_NO_INTERVAL);
    expect("target", tessera_hint_update_target_work_duration(wg, 2666666), TESSERA_OK);
    expect("report", tessera_hint_report_actual_work_duration(wg, 400000), TESSERA_OK);

    /* A deferred join that fits: a reservation follows. */
    expect_deferred("deferred join", 1, TESSERA_OK);

    /* Fill the workgroup from other threads, then one more is refused. */
    int capacity = tessera_workgroup_max_parallel_threads(wg);
    pthread_t threads[64];
    int codes[64];
    int others = capacity - 1 < 63 ? capacity - 1 : 63;
    for (int i = 0; i < others; i++) pthread_create(&threads[i], NULL, join_one, &codes[i]);
    wait_answers(others);
    for (int i = 0; i < others; i++) expect("join up to capacity", codes[i], TESSERA_OK);
    int extra;
    pthread_create(&threads[63], NULL, join_one, &extra);
    wait_answers(others + 1);
    expect("join past capacity", extra, TESSERA_ERR_REFUSED);
    /* Deferred, the refusal comes in the stats; the member leaves. */
    expect_deferred("deferred join past capacity", 0, TESSERA_ERR_REFUSED);
    __atomic_store_n(&release, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < others; i++) {
        pthread_join(threads[i], NULL);
        expect("leave from another thread", codes[i], TESSERA_OK);
    }
    pthread_join(threads[63], NULL);

    tessera_join_token forged = token;
    forged.opaque[0] ^= 1;
    expect("leave with another's token", tessera_workgroup_leave(wg, &forged), TESSERA_ERR_INVALID);
    expect("leave", tessera_workgroup_leave(wg, &token), TESSERA_OK);
    expect("leave twice", tessera_workgroup_leave(wg, &token), TESSERA_ERR_NOT_JOINED);
    expect("close", tessera_workgroup_close(wg), TESSERA_OK);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "refusals ok", failures);
    return failures ? 1 : 0;
}
