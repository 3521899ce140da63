// A gumbo parse that stops at a deadline: POST /v1/rewrite's parser must not go on using a core after its request
// was answered 422 `too-complex`. gumbo has no way to stop a parse, but it allocates all its memory through the
// allocator in its options, many times per tag: the allocator here looks at the clock and, past the deadline,
// jumps back out of the parse (longjmp) and frees every block the parse had allocated. gumbo keeps no state outside
// the blocks it allocates, so nothing is left behind.
#ifndef GUMBO_DEADLINE_H
#define GUMBO_DEADLINE_H
#include <gumbo.h>
#include <stddef.h>

typedef struct GumboDeadline GumboDeadline;

/// A parse that must end within `seconds` (CLOCK_MONOTONIC) from now. NULL when out of memory.
GumboDeadline *gumbo_deadline_create(double seconds);

/// Parses `length` bytes of `text` with `options` (their allocator, deallocator and userdata are replaced).
/// Returns NULL when the deadline passed first or memory ran out (`gumbo_deadline_expired` tells which).
/// The output lives until `gumbo_deadline_destroy`.
GumboOutput *gumbo_deadline_parse(GumboDeadline *parse, GumboOptions options, const char *text, size_t length);

/// Whether the parse was stopped by its deadline (not by a failed allocation).
int gumbo_deadline_expired(const GumboDeadline *parse);

/// Destroys `output` through gumbo (`gumbo_destroy_output`), which frees each of its blocks one by one (tests: the
/// parse's list is then empty).
void gumbo_deadline_destroy_output(GumboDeadline *parse, GumboOutput *output);

/// Blocks allocated and not freed: 0 after a parse's output was destroyed (tests).
size_t gumbo_deadline_live_blocks(const GumboDeadline *parse);

/// Frees every block the parse allocated (its output too) and the parse itself.
void gumbo_deadline_destroy(GumboDeadline *parse);

#endif
