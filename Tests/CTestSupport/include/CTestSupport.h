#ifndef CTESTSUPPORT_H
#define CTESTSUPPORT_H

#include <spawn.h>
#include <stddef.h>
#include <stdint.h>

/// glibc declares these only under _GNU_SOURCE / __USE_MISC, which Swift's Glibc module does not define.
int CTestSupport_posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
int CTestSupport_pipe2_cloexec(int ends[2]);

/// The sum over the RGB channels of the squared differences of two RGBA pictures of `count` pixels.
uint64_t CTestSupport_rgb_squared_error(const uint32_t *a, const uint32_t *b, size_t count);
/// Each 2x2 block's mean colour into `out` ((width / 2) x (height / 2) pixels; an odd last row or column dropped).
void CTestSupport_average_2x2(const uint32_t *picture, size_t width, size_t height, uint32_t *out);
/// `count` RGBA pixels flattened over white into opaque pixels.
void CTestSupport_flatten_over_white(const uint8_t *rgba, size_t count, uint32_t *out);

#endif
