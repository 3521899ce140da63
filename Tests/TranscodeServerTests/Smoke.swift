import Testing

@testable import TranscodeServer
