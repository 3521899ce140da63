#ifndef CTESTSUPPORT_H
#define CTESTSUPPORT_H

#include <spawn.h>

/// glibc declares these only under _GNU_SOURCE / __USE_MISC, which Swift's Glibc module does not define.
int CTestSupport_posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
int CTestSupport_pipe2_cloexec(int ends[2]);

#endif
