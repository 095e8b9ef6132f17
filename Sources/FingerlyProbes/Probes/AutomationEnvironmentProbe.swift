import FingerlyHost
import FingerlyModel

/// Signs in the environment that nobody is at the keyboard: CI variables (a table in
/// probes/), a virtual X display started by xvfb-run, and no login session.
package struct AutomationEnvironmentProbe: Probe {
    package let id = "automation-environment"
    /// The kernel's audit session id when the process belongs to no login session.
    static let noSession = "4294967295"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        let environment: ProcessEnvironment
        do { environment = try ProcessEnvironment.read(from: host) } catch { throw ProbeFailure(error) }

        // CI=false is how a developer says "this is not CI" in a shell that inherited CI markers.
        let ciDisabled = ["false", "0", "no"].contains(environment["CI"]?.lowercased() ?? "")
        var markers: [String] = []
        if !ciDisabled {
            for row in context.tables.patterns("ciEnvironmentVariables") {
                if let value = environment[row.pattern], !value.isEmpty, value.lowercased() != "false" {
                    markers.append("\(row.pattern) (\(row.kind))")
                }
            }
        } else {
            context.note("CI=\(environment["CI"] ?? "") overrides the CI variables")
        }
        context.emit("automation.ci_markers", markers)
        if let display = environment["DISPLAY"] { context.emit("automation.display", display) }
        context.emit("automation.xvfb_run", environment["XAUTHORITY"]?.contains("xvfb-run") == true)

        let sessionId = context.attemptIfPresent { () throws(HostReadError) in try host.readAttribute("/proc/self/sessionid") }
        let inSession = environment["XDG_SESSION_ID"] != nil || (sessionId != nil && sessionId != Self.noSession)
        context.emit("automation.login_session", inSession)
    }
}
