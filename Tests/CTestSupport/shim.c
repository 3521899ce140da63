#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include "CTestSupport.h"

int CTestSupport_posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from) {
#if defined(__GLIBC__)
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
#else
    // Elsewhere (the suite runs on Linux) the child inherits what is not close-on-exec.
    (void)actions;
    (void)from;
    return 0;
#endif
}

int CTestSupport_pipe2_cloexec(int ends[2]) {
#if defined(__linux__)
    return pipe2(ends, O_CLOEXEC);
#else
    return pipe(ends);
#endif
}
