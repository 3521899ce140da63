#include "gumbo_deadline.h"

#include <setjmp.h>
#include <stdlib.h>
#include <time.h>

// Each block gumbo gets is preceded by this header, which links it into the parse's list of live blocks: 16 bytes,
// so the block keeps malloc's 16-byte alignment.
typedef struct Header {
    struct Header *previous;
    struct Header *next;
} __attribute__((aligned(16))) Header;

struct GumboDeadline {
    jmp_buf jump;
    Header live;  // the list's sentinel
    size_t liveBlocks;
    struct timespec deadline;
    unsigned allocations;
    int expired;
    // Set while gumbo_deadline_parse runs: the only time there is a frame to jump back to.
    int parsing;
};

static int past(const struct timespec *deadline) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static void *allocate(void *userdata, size_t size) {
    GumboDeadline *parse = userdata;
    // The clock every 16 allocations: gumbo allocates several times per tag and attribute, so a parse stops within
    // microseconds of its deadline.
    if (parse->parsing && (++parse->allocations & 15) == 0 && past(&parse->deadline)) {
        parse->expired = 1;
        parse->parsing = 0;
        longjmp(parse->jump, 1);
    }
    Header *header = malloc(sizeof(Header) + size);
    // gumbo does not check for NULL: a failed allocation ends the parse here rather than in a crash there (outside a
    // parse there is nowhere to go back to: abort, as gumbo's own allocator would crash).
    if (header == NULL) {
        if (!parse->parsing) abort();
        parse->parsing = 0;
        longjmp(parse->jump, 1);
    }
    header->previous = &parse->live;
    header->next = parse->live.next;
    parse->live.next->previous = header;
    parse->live.next = header;
    parse->liveBlocks++;
    return header + 1;
}

static void deallocate(void *userdata, void *block) {
    if (block == NULL) return;
    GumboDeadline *parse = userdata;
    Header *header = (Header *)block - 1;
    header->previous->next = header->next;
    header->next->previous = header->previous;
    parse->liveBlocks--;
    free(header);
}

GumboDeadline *gumbo_deadline_create(double seconds) {
    GumboDeadline *parse = calloc(1, sizeof(GumboDeadline));
    if (parse == NULL) return NULL;
    parse->live.previous = parse->live.next = &parse->live;
    clock_gettime(CLOCK_MONOTONIC, &parse->deadline);
    // At most a day: the conversion below must stay in range (and no parse is given longer).
    if (!(seconds > 0)) seconds = 0;
    if (seconds > 86400) seconds = 86400;
    long long nanoseconds = (long long)(seconds * 1e9) + parse->deadline.tv_nsec;
    parse->deadline.tv_sec += nanoseconds / 1000000000LL;
    parse->deadline.tv_nsec = nanoseconds % 1000000000LL;
    return parse;
}

GumboOutput *gumbo_deadline_parse(GumboDeadline *parse, GumboOptions options, const char *text, size_t length) {
    options.allocator = allocate;
    options.deallocator = deallocate;
    options.userdata = parse;
    // Stopped: what the parse allocated stays on the list, for gumbo_deadline_destroy.
    if (setjmp(parse->jump) != 0) return NULL;
    parse->parsing = 1;
    GumboOutput *output = gumbo_parse_with_options(&options, text, length);
    parse->parsing = 0;
    return output;
}

void gumbo_deadline_destroy_output(GumboDeadline *parse, GumboOutput *output) {
    GumboOptions options = kGumboDefaultOptions;
    options.allocator = allocate;
    options.deallocator = deallocate;
    options.userdata = parse;
    gumbo_destroy_output(&options, output);
}

int gumbo_deadline_expired(const GumboDeadline *parse) { return parse->expired; }

size_t gumbo_deadline_live_blocks(const GumboDeadline *parse) { return parse->liveBlocks; }

void gumbo_deadline_destroy(GumboDeadline *parse) {
    Header *header = parse->live.next;
    while (header != &parse->live) {
        Header *next = header->next;
        free(header);
        header = next;
    }
    free(parse);
}
