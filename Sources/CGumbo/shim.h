// Google's gumbo, the HTML5 parser (Debian's libgumbo-dev): a spec-compliant tree with the source position
// of every tag, which lets POST /v1/rewrite replace exactly the bytes of a tag and keep every other byte.
#ifndef CGUMBO_SHIM_H
#define CGUMBO_SHIM_H
#include <gumbo.h>
#endif
