#include "CTestSupport.h"

// Pixels are RGBA bytes in memory (R in the low byte of a little-endian uint32_t), as the Swift tests hold them.
// These loops run over every frame of the corpus; in C, built optimised, they cost a fraction of what the same
// loops cost in an unoptimised Swift test build.

uint64_t CTestSupport_rgb_squared_error(const uint32_t *a, const uint32_t *b, size_t count) {
    uint64_t squared = 0;
    for (size_t index = 0; index < count; index++) {
        uint32_t x = a[index], y = b[index];
        int64_t red = (int64_t)(x & 0xFF) - (int64_t)(y & 0xFF);
        int64_t green = (int64_t)((x >> 8) & 0xFF) - (int64_t)((y >> 8) & 0xFF);
        int64_t blue = (int64_t)((x >> 16) & 0xFF) - (int64_t)((y >> 16) & 0xFF);
        squared += (uint64_t)(red * red + green * green + blue * blue);
    }
    return squared;
}

void CTestSupport_average_2x2(const uint32_t *picture, size_t width, size_t height, uint32_t *out) {
    size_t columns = width / 2, rows = height / 2;
    for (size_t row = 0; row < rows; row++) {
        for (size_t column = 0; column < columns; column++) {
            size_t top = 2 * row * width + 2 * column;
            uint32_t a = picture[top], b = picture[top + 1], c = picture[top + width], d = picture[top + width + 1];
            uint32_t value = 0xFF000000u;
            for (unsigned shift = 0; shift <= 16; shift += 8) {
                uint32_t sum = ((a >> shift) & 0xFF) + ((b >> shift) & 0xFF) + ((c >> shift) & 0xFF)
                    + ((d >> shift) & 0xFF);
                value |= ((sum + 2) / 4) << shift;
            }
            out[row * columns + column] = value;
        }
    }
}

void CTestSupport_flatten_over_white(const uint8_t *rgba, size_t count, uint32_t *out) {
    for (size_t index = 0; index < count; index++) {
        const uint8_t *pixel = rgba + index * 4;
        uint32_t alpha = pixel[3], value = 0xFF000000u;
        for (unsigned channel = 0; channel < 3; channel++) {
            uint32_t mixed = ((uint32_t)pixel[channel] * alpha + 255 * (255 - alpha)) / 255;
            value |= mixed << (8 * channel);
        }
        out[index] = value;
    }
}
