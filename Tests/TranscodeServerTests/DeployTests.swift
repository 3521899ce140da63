import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `deploy/kubernetes/`: the manifests pass Kubernetes' own schemas (PyPI `kubernetes-validate`, strict), the custom
/// resources (KEDA's, the Prometheus Operator's) point at what the manifests define, the shutdown fits the pod's
/// grace period, and the KEDA trigger's query counts exactly the jobs a worker can claim, on a real database.
@Suite(.serialized, .tags(.integration, .childProcess), .timeLimit(.minutes(5))) struct DeployTests {
    static let directory = ConfigurationTests.repositoryRoot.appendingPathComponent("deploy/kubernetes").path

    static var files: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: Self.directory)) ?? []).filter { $0.hasSuffix(".yaml") }
            .sorted().map { Self.directory + "/" + $0 }
    }

    /// Every document of every manifest, as JSON objects (PyYAML, which `kubernetes-validate` brings).
    static func documents() async throws -> [[String: Any]] {
        let script = """
            import json, sys, yaml
            print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d is not None]))
            """
        let run = try await runProcess("/usr/bin/python3", ["-c", script] + Self.files, timeout: .seconds(60))
        try #require(run.status == 0, "cannot read the manifests: \(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [[String: Any]])
    }

    static func document(_ documents: [[String: Any]], kind: String, name: String) throws -> [String: Any] {
        try #require(
            documents.first {
                $0["kind"] as? String == kind && ($0["metadata"] as? [String: Any])?["name"] as? String == name
            },
            "no \(kind) \(name) in deploy/kubernetes")
    }

    /// `kubernetes-validate`: on PATH or where `pip install --user` puts it. Fails, never skips, without it.
    static func validator() throws -> String {
        let candidates =
            (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map {
                "\($0)/kubernetes-validate"
            }
            + [NSHomeDirectory() + "/.local/bin/kubernetes-validate"]
        return try #require(
            candidates.first { FileManager.default.isExecutableFile(atPath: $0) },
            "kubernetes-validate is missing; install it with: scripts/install-deps --test (pip install kubernetes-validate)"
        )
    }

    /// Every built-in resource passes its schema in strict mode (no field Kubernetes does not know), and only the
    /// custom resources have none; a manifest with a misspelt field fails, so the check can fail.
    @Test func theManifestsPassKubernetesSchemas() async throws {
        let validator = try Self.validator()
        let run = try await runProcess(validator, ["--strict"] + Self.files, timeout: .seconds(120))
        let output = run.stdout + run.stderr
        #expect(run.status == 0, "\(output)")
        let documents = try await Self.documents()
        let custom: Set<String> = ["ScaledObject", "TriggerAuthentication", "ServiceMonitor"]
        let builtIn = documents.filter { !custom.contains($0["kind"] as? String ?? "") }
        #expect(builtIn.count >= 6, "\(documents.map { $0["kind"] ?? "?" })")
        #expect(output.components(separatedBy: "passed for resource").count - 1 == builtIn.count, "\(output)")
        #expect(output.components(separatedBy: "Couldn't find schema").count - 1 == documents.count - builtIn.count)
        #expect(!output.contains("ERROR"), "\(output)")

        try await withTemporaryDirectory { scratch in
            let broken = scratch + "/deployment.yaml"
            let text = try String(contentsOfFile: Self.directory + "/deployment.yaml", encoding: .utf8)
            try text.replacingOccurrences(of: "containerPort:", with: "containerPorts:").write(
                toFile: broken, atomically: true, encoding: .utf8)
            let failed = try await runProcess(validator, ["--strict", broken], timeout: .seconds(120))
            #expect(failed.status != 0, "\(failed.stdout)")
        }
    }

    /// What the schemas cannot see: the custom resources name the Deployment, Service, ports and secrets the other
    /// manifests define; the probes are the server's; the pod's grace period outlasts the drain and the grace the
    /// configuration gives; and every `TRANSCODE_` variable of the configuration names a key the server knows.
    @Test func theManifestsHoldTogether() async throws {
        let documents = try await Self.documents()
        let deployment = try Self.document(documents, kind: "Deployment", name: "transcode-server")
        let spec = try #require(deployment["spec"] as? [String: Any])
        let template = try #require(spec["template"] as? [String: Any])
        let labels = try #require((template["metadata"] as? [String: Any])?["labels"] as? [String: String])
        let pod = try #require(template["spec"] as? [String: Any])
        let container = try #require((pod["containers"] as? [[String: Any]])?.first)
        #expect(
            ((container["livenessProbe"] as? [String: Any])?["httpGet"] as? [String: Any])?["path"] as? String
                == "/healthz")
        #expect(
            ((container["readinessProbe"] as? [String: Any])?["httpGet"] as? [String: Any])?["path"] as? String
                == "/readyz")
        let portName = try #require((container["ports"] as? [[String: Any]])?.first?["name"] as? String)

        // The configuration: the shutdown fits the grace period, and every variable is a key.
        let config = try Self.document(documents, kind: "ConfigMap", name: "transcode-server")
        let environment = try #require(config["data"] as? [String: String])
        let drain = try #require(Double(environment["TRANSCODE_SHUTDOWN_DRAIN_SECONDS"] ?? ""))
        let grace = try #require(Double(environment["TRANSCODE_SHUTDOWN_GRACE_SECONDS"] ?? ""))
        let period = try #require(pod["terminationGracePeriodSeconds"] as? Int)
        #expect(Double(period) > drain + grace, "\(period) s for a \(drain) s drain and \(grace) s of grace")
        let secret = try Self.document(documents, kind: "Secret", name: "transcode-server")
        let secrets = try #require(secret["stringData"] as? [String: String])
        let envFrom = try #require(container["envFrom"] as? [[String: Any]])
        #expect(envFrom.contains { ($0["configMapRef"] as? [String: Any])?["name"] as? String == "transcode-server" })
        #expect(envFrom.contains { ($0["secretRef"] as? [String: Any])?["name"] as? String == "transcode-server" })
        // The server reads them as it would in the pod: an unknown TRANSCODE_ variable or a bad value stops it
        // (exit 78) before it serves; `--version` is not enough, so it is asked to sign a path, which reads the
        // whole configuration and serves nothing.
        let binary = try OperationsTests.debugBinary()
        func sign(_ variables: [String: String]) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await runProcess(
                "/usr/bin/env",
                ["-i", "PATH=/usr/bin:/bin"] + variables.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    + [binary, "sign", "https://example.com/a.gif"],
                timeout: .seconds(60))
        }
        // The example's secrets as shipped are refused: placeholders never go live.
        let shipped = try await sign(environment.merging(secrets) { $1 })
        #expect(shipped.status == 78, "\(shipped.stderr)")
        var variables = environment.merging(secrets) { $1 }
        variables["TRANSCODE_SIGNING_KEYS"] = String(repeating: "4b", count: 32)
        variables["TRANSCODE_SIGNING_SALTS"] = String(repeating: "53", count: 16)
        variables["TRANSCODE_AUTH_TOKENS"] = UUID().uuidString + UUID().uuidString
        let signed = try await sign(variables)
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stdout.hasPrefix("/v1/"), "\(signed.stdout)")

        let service = try Self.document(documents, kind: "Service", name: "transcode-server")
        let serviceSpec = try #require(service["spec"] as? [String: Any])
        #expect(serviceSpec["selector"] as? [String: String] == labels)
        let servicePort = try #require((serviceSpec["ports"] as? [[String: Any]])?.first)
        #expect(servicePort["targetPort"] as? String == portName)

        let budget = try Self.document(documents, kind: "PodDisruptionBudget", name: "transcode-server")
        #expect(
            ((budget["spec"] as? [String: Any])?["selector"] as? [String: Any])?["matchLabels"] as? [String: String]
                == labels)

        let monitor = try Self.document(documents, kind: "ServiceMonitor", name: "transcode-server")
        #expect(monitor["apiVersion"] as? String == "monitoring.coreos.com/v1")
        let monitorSpec = try #require(monitor["spec"] as? [String: Any])
        let selected = try #require((monitorSpec["selector"] as? [String: Any])?["matchLabels"] as? [String: String])
        let serviceLabels = try #require((service["metadata"] as? [String: Any])?["labels"] as? [String: String])
        #expect(selected.allSatisfy { serviceLabels[$0.key] == $0.value })
        let endpoint = try #require((monitorSpec["endpoints"] as? [[String: Any]])?.first)
        #expect(endpoint["port"] as? String == servicePort["name"] as? String)
        #expect(endpoint["path"] as? String == "/metrics")

        let scaled = try Self.document(documents, kind: "ScaledObject", name: "transcode-server")
        #expect(scaled["apiVersion"] as? String == "keda.sh/v1alpha1")
        let scaledSpec = try #require(scaled["spec"] as? [String: Any])
        #expect((scaledSpec["scaleTargetRef"] as? [String: Any])?["name"] as? String == "transcode-server")
        let trigger = try #require((scaledSpec["triggers"] as? [[String: Any]])?.first)
        #expect(trigger["type"] as? String == "postgresql")
        let authenticationName = try #require(
            (trigger["authenticationRef"] as? [String: Any])?["name"] as? String)
        let authentication = try Self.document(documents, kind: "TriggerAuthentication", name: authenticationName)
        let reference = try #require(
            ((authentication["spec"] as? [String: Any])?["secretTargetRef"] as? [[String: Any]])?.first)
        #expect(reference["parameter"] as? String == "connection")
        let queueSecret = try Self.document(documents, kind: "Secret", name: reference["name"] as? String ?? "")
        #expect((queueSecret["stringData"] as? [String: String])?[reference["key"] as? String ?? ""] != nil)
        let metadata = try #require(trigger["metadata"] as? [String: String])
        #expect(Double(metadata["targetQueryValue"] ?? "") != nil)
    }

    /// The KEDA trigger's query, run on a database seeded with jobs in every state, counts exactly the conversion
    /// jobs `PostgresQueue.claim` then takes one by one: due ones and expired leases, not jobs due later, live
    /// leases, leases expired on their last attempt (dead letters), ended jobs or webhook deliveries.
    @Test(.tags(.database)) func theKEDAQueryCountsWhatAWorkerCanClaim() async throws {
        let documents = try await Self.documents()
        let scaled = try Self.document(documents, kind: "ScaledObject", name: "transcode-server")
        let trigger = try #require(((scaled["spec"] as? [String: Any])?["triggers"] as? [[String: Any]])?.first)
        let query = try #require((trigger["metadata"] as? [String: String])?["query"])
        try await withPostgres { _, client in
            let logger = Logger(label: "test")
            let queue = PostgresQueue(client: client, logger: logger)
            try await queue.migrate()
            func add(_ name: String, kind: JobKind = .conversion, _ update: String?) async throws {
                let (id, _) = try await queue.enqueue(resultKey: name, kind: kind, payload: "{}", maxAttempts: 3)
                if let update {
                    try await client.query(
                        PostgresQuery(unsafeSQL: "UPDATE transcode_jobs SET \(update) WHERE id = \(id)"))
                }
            }
            // Claimable: three due, two expired leases with attempts left.
            for index in 0..<3 { try await add("due-\(index)", nil) }
            let expired = "state = 'running', lease_owner = 'gone', lease_until = now() - interval '1 minute'"
            try await add("expired-0", expired + ", attempts = 1")
            try await add("expired-1", expired + ", attempts = 2")
            // Not claimable.
            try await add("later", "run_after = now() + interval '1 hour'")
            try await add("leased", "state = 'running', lease_owner = 'alive', lease_until = now() + interval '1 hour'")
            try await add("last-attempt", expired + ", attempts = 3")
            try await add("done", "state = 'done'")
            try await add("dead", "state = 'dead'")
            try await add("webhook", kind: .webhook, nil)

            var counted = -1
            for try await count in try await client.query(PostgresQuery(unsafeSQL: query)).decode(Int.self) {
                counted = count
            }
            var claimed = 0
            while try await queue.claim(owner: "test", leaseSeconds: 60, kind: .conversion) != nil {
                claimed += 1
            }
            #expect(claimed == 5)
            #expect(counted == claimed)
            // Once claimed, none is waiting.
            for try await count in try await client.query(PostgresQuery(unsafeSQL: query)).decode(Int.self) {
                #expect(count == 0)
            }
        }
    }
}
