// A C++ host built against the header through pkg-config, run by a user
// without CAP_SYS_NICE: the workgroup opens best-effort, says so, and every
// call works without a reservation. Prints what each call returned.
#include <tessera.h>

#include <cstdio>
#include <ctime>

static uint64_t now_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

int main() {
    tessera_workgroup *wg = tessera_workgroup_open("cpp-best-effort");
    if (wg == nullptr) {
        std::printf("open failed: %s\n", tessera_strerror(tessera_last_error()));
        return 1;
    }
    const int32_t opened = tessera_last_error();
    tessera_join_token token{};
    const int32_t joined = tessera_workgroup_join(wg, &token);
    int32_t worst = 0;
    for (int cycle = 0; cycle < 10; cycle++) {
        const uint64_t start = now_ns();
        const int32_t a = tessera_workgroup_interval_start(wg, start, start + 1000000);
        const int32_t b = tessera_workgroup_interval_finish(wg);
        worst = a < worst ? a : (b < worst ? b : worst);
    }
    const int32_t guaranteed = tessera_workgroup_guaranteed(wg);
    const int32_t left = tessera_workgroup_leave(wg, &token);
    const int32_t closed = tessera_workgroup_close(wg);
    std::printf("opened=%d guaranteed=%d joined=%d intervals=%d left=%d closed=%d (%s)\n",
                opened, guaranteed, joined, worst, left, closed, tessera_strerror(opened));
    return 0;
}
