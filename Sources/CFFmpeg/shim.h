#ifndef CFFMPEG_SHIM_H
#define CFFMPEG_SHIM_H

// The C declarations the Transcoder needs from FFmpeg (libavcodec, libavformat, libavutil, libswscale),
// giflib, libwebp's demux and mux libraries (animated WebP in and out) and libavif (animated AVIF out). Function-like macros do not import into Swift, so the few we need are re-exported as
// static inline functions carrying the module prefix (the CNIOLinux convention).

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/cpu.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libavutil/sha.h>
#include <libswscale/swscale.h>
#include <gif_lib.h>
#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>
#include <avif/avif.h>

/// `AVERROR(e)`: FFmpeg's negative error code for a POSIX errno value.
static inline int CFFmpeg_AVERROR(int e) { return AVERROR(e); }

/// `AVERROR_EOF`: returned by the send/receive API when a codec is fully drained.
static inline int CFFmpeg_AVERROR_EOF(void) { return AVERROR_EOF; }

/// `AVERROR(EAGAIN)`: the send/receive API's "call the other side first".
static inline int CFFmpeg_AVERROR_EAGAIN(void) { return AVERROR(EAGAIN); }

/// `AVERROR_ENCODER_NOT_FOUND` and `AVERROR_DECODER_NOT_FOUND`: FFmpeg was built without the codec asked for.
static inline int CFFmpeg_AVERROR_ENCODER_NOT_FOUND(void) { return AVERROR_ENCODER_NOT_FOUND; }
static inline int CFFmpeg_AVERROR_DECODER_NOT_FOUND(void) { return AVERROR_DECODER_NOT_FOUND; }

/// `AV_NOPTS_VALUE`: a timestamp that is not set. The macro is a 64-bit constant that Swift sees as
/// unsigned, so it is re-exported with its real type.
static inline int64_t CFFmpeg_AV_NOPTS_VALUE(void) { return AV_NOPTS_VALUE; }

/// A read cursor over an input held in memory: handed to giflib through `GifFileType.UserData`, and to
/// libavformat as the opaque of a custom `AVIOContext`. The caller owns `data` and keeps it alive until
/// `DGifCloseFile` or `CFFmpeg_MemoryInputClose`.
typedef struct CFFmpeg_MemoryInput {
    const uint8_t *data;
    size_t size;
    size_t position;
} CFFmpeg_MemoryInput;

/// giflib's `InputFunc` over `CFFmpeg_MemoryInput`. A short read at the end of the data is how a
/// truncated file shows up: giflib then reports `D_GIF_ERR_READ_FAILED` for the record being read.
static inline int CFFmpeg_GifMemoryRead(GifFileType *gif, GifByteType *buffer, int length) {
    CFFmpeg_MemoryInput *reader = (CFFmpeg_MemoryInput *)gif->UserData;
    if (reader == NULL || length <= 0) {
        return 0;
    }
    size_t remaining = reader->size - reader->position;
    size_t count = (size_t)length < remaining ? (size_t)length : remaining;
    if (count > 0) {
        memcpy(buffer, reader->data + reader->position, count);
        reader->position += count;
    }
    return (int)count;
}

/// Opens a giflib decoder over `reader` (which must outlive the returned handle).
static inline GifFileType *CFFmpeg_DGifOpenMemory(CFFmpeg_MemoryInput *reader, int *error) {
    return DGifOpen(reader, CFFmpeg_GifMemoryRead, error);
}

static inline int CFFmpeg_MemoryInputRead(void *opaque, uint8_t *buffer, int length) {
    CFFmpeg_MemoryInput *input = (CFFmpeg_MemoryInput *)opaque;
    if (length <= 0) {
        return AVERROR(EINVAL);
    }
    size_t remaining = input->size - input->position;
    size_t count = (size_t)length < remaining ? (size_t)length : remaining;
    if (count == 0) {
        return AVERROR_EOF;
    }
    memcpy(buffer, input->data + input->position, count);
    input->position += count;
    return (int)count;
}

static inline int64_t CFFmpeg_MemoryInputSeek(void *opaque, int64_t offset, int whence) {
    CFFmpeg_MemoryInput *input = (CFFmpeg_MemoryInput *)opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return (int64_t)input->size;
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)input->position; break;
    case SEEK_END: base = (int64_t)input->size; break;
    default: return AVERROR(EINVAL);
    }
    if (offset > (int64_t)input->size - base || base + offset < 0) {
        return AVERROR(EINVAL);
    }
    input->position = (size_t)(base + offset);
    return (int64_t)input->position;
}

/// A read-only `AVIOContext` over `input` (which must outlive it); NULL when memory runs out. Close it with
/// `CFFmpeg_MemoryInputClose`.
static inline AVIOContext *CFFmpeg_MemoryInputOpen(CFFmpeg_MemoryInput *input) {
    const int size = 64 * 1024;
    unsigned char *buffer = (unsigned char *)av_malloc(size);
    if (buffer == NULL) {
        return NULL;
    }
    AVIOContext *context = avio_alloc_context(
        buffer, size, 0, input, CFFmpeg_MemoryInputRead, NULL, CFFmpeg_MemoryInputSeek);
    if (context == NULL) {
        av_free(buffer);
    }
    return context;
}

/// Frees a context from `CFFmpeg_MemoryInputOpen` and its buffer (which libavformat may have replaced).
static inline void CFFmpeg_MemoryInputClose(AVIOContext **context) {
    if (context != NULL && *context != NULL) {
        av_freep(&(*context)->buffer);
        avio_context_free(context);
    }
}

/// Where libx264's own SSIM of each picture goes: x264 (with `ssim=1` among its parameters) scores every
/// reconstructed picture's luma against the picture it was given, and logs it on the line it logs per picture
/// ("frame=  12 QP=... size=... bytes SSIM Y:0.98765"), which libavcodec forwards to `av_log` with the
/// `AVCodecContext` as the logging object. An encoder that wants the scores points its context's `opaque` at
/// one of these; `record` is then called, on the thread that sends pictures or drains packets, with x264's
/// picture number (coding order) and its SSIM.
typedef struct CFFmpeg_X264SSIMSink {
    void (*record)(void *owner, int frame, double ssim);
    void *owner;
} CFFmpeg_X264SSIMSink;

/// The process's `av_log` callback: x264's per-picture lines for a context with a sink go to the sink; every
/// other message to FFmpeg's default callback (which honours `av_log_set_level`).
static void CFFmpeg_LogCallback(void *object, int level, const char *format, va_list arguments) {
    if (level == AV_LOG_DEBUG && object != NULL && format != NULL && strncmp(format, "frame=", 6) == 0) {
        const AVClass *kind = *(const AVClass **)object;
        if (kind != NULL && kind->class_name != NULL && strcmp(kind->class_name, "AVCodecContext") == 0) {
            CFFmpeg_X264SSIMSink *sink = (CFFmpeg_X264SSIMSink *)((AVCodecContext *)object)->opaque;
            if (sink != NULL) {
                char line[256];
                vsnprintf(line, sizeof line, format, arguments);
                const char *ssim = strstr(line, "SSIM Y:");
                if (ssim != NULL) {
                    sink->record(sink->owner, atoi(line + 6), strtod(ssim + 7, NULL));
                }
                return;
            }
        }
    }
    av_log_default_callback(object, level, format, arguments);
}

/// Installs `CFFmpeg_LogCallback` as the process's `av_log` callback.
static inline void CFFmpeg_InstallLogCallback(void) { av_log_set_callback(CFFmpeg_LogCallback); }

#endif
