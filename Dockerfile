# GIF-to-MP4 transcoding service.
#   docker build -t transcode-server .
#   docker run -p 8080:8080 -v cache:/var/cache/transcode-server transcode-server
# The build stage's package list is the one .ci/run and scripts/install-deps use (a test keeps them equal).

FROM swift:6.3-bookworm AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y make pkg-config libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libgif-dev libwebp-dev libavif-dev libgumbo-dev ffmpeg \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
RUN swift build -c release --product transcode-server --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/transcode-server" /usr/local/bin/transcode-server \
    && cp -R "$(swift build -c release --show-bin-path)/gif2mp4_TranscodeServer.resources" /usr/local/bin/

FROM debian:bookworm-slim
# Only the runtime libraries: FFmpeg 5.1 (libavcodec59, libavformat59, libavutil57, libswscale6), giflib and
# libwebp (libwebp7, libwebpdemux2, libwebpmux3: the animated WebP output), libavif15 (the animated AVIF output).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libavcodec59 libavformat59 libavutil57 libswscale6 libgif7 libwebp7 libwebpdemux2 libwebpmux3 libavif15 libgumbo1 ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/cache/transcode-server transcode \
    && mkdir -p /var/cache/transcode-server /etc/transcode-server \
    && chown transcode:transcode /var/cache/transcode-server
COPY --from=build /usr/local/bin/transcode-server /usr/local/bin/transcode-server
COPY --from=build /usr/local/bin/gif2mp4_TranscodeServer.resources /usr/local/bin/gif2mp4_TranscodeServer.resources
COPY config/transcode-server.json /etc/transcode-server/transcode-server.json
USER transcode
# Environment beats the file: listen on every interface inside the container, cache in the volume.
ENV TRANSCODE_HOST=0.0.0.0 \
    TRANSCODE_PORT=8080 \
    TRANSCODE_CACHE_DIRECTORY=/var/cache/transcode-server
VOLUME /var/cache/transcode-server
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/transcode-server"]
CMD ["serve", "--config", "/etc/transcode-server/transcode-server.json"]
