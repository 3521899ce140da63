/// What this build is: `--version`, the `transcode_build_info` metric and `config show`.
package enum BuildInfo {
    package static let version = "0.9.0"
}
