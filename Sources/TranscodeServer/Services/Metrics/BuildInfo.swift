/// What this build is: `--version`, the `transcode_build_info` metric and `config show`.
enum BuildInfo {
    static let version = "0.9.0"
}
