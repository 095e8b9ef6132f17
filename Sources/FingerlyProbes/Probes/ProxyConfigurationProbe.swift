import FingerlyHost
import FingerlyModel

/// Proxy settings outside the process environment: /etc/environment, apt's Acquire::*::Proxy,
/// KDE's kioslaverc and GNOME's dconf database (when readable), and tunnel interfaces (VPNs),
/// which are only a weak sign.
package struct ProxyConfigurationProbe: Probe {
    package let id = "proxy-configuration"
    static let proxyNames: Set<String> = ["http_proxy", "https_proxy", "all_proxy", "ftp_proxy"]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        func text(_ path: String) -> String? {
            context.attemptIfPresent { () throws(HostReadError) in try host.readText(path, limit: 1024 * 1024) }
        }

        var environmentFile: [String] = []
        for line in (text("/etc/environment") ?? "").lines {
            guard let equals = line.firstIndex(of: "=") else { continue }
            let name = line[..<equals].trimmingWhitespace().replacing("export ", with: "")
            guard Self.proxyNames.contains(name.lowercased()) else { continue }
            let value = line[line.index(after: equals)...].trimmingWhitespace().trimmingCharacters(in: "\"'")
            if !value.isEmpty { environmentFile.append("\(name)=\(ProxyEnvironmentProbe.withoutCredentials(value))") }
        }
        context.emit("proxy.etc_environment", environmentFile)

        var apt: [String] = []
        let aptFiles = ["/etc/apt/apt.conf"] + (context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/etc/apt/apt.conf.d") } ?? []).map { "/etc/apt/apt.conf.d/" + $0 }
        for path in aptFiles {
            // Only lines that can hold a setting are trimmed: most of apt's files configure something else.
            for line in (text(path) ?? "").lines where line.containsUTF8("Acquire::") {
                let trimmed = line.trimmingWhitespace()
                guard trimmed.hasPrefix("Acquire::"), let quote = trimmed.firstIndex(of: "\"") else { continue }
                let key = trimmed[..<quote].trimmingWhitespace()
                guard key.lowercased().hasSuffix("::proxy") else { continue }
                let value = trimmed[trimmed.index(after: quote)...].prefix { $0 != "\"" }
                guard !value.isEmpty, !["direct", "false"].contains(value.lowercased()) else { continue }
                apt.append("\(key) \(ProxyEnvironmentProbe.withoutCredentials(String(value)))")
            }
        }
        context.emit("proxy.apt", apt)

        var desktop: [String] = []
        if let home = context.attemptIfPresent({ () throws(HostReadError) in try ProcessEnvironment.read(from: host) })?["HOME"], home.hasPrefix("/") {
            if let kde = text(home + "/.config/kioslaverc") {
                var fields: [String: String] = [:]
                var inProxySection = false
                for line in kde.lines.map({ $0.trimmingWhitespace() }) {
                    if line.hasPrefix("[") { inProxySection = line == "[Proxy Settings]"; continue }
                    guard inProxySection, let equals = line.firstIndex(of: "=") else { continue }
                    fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
                }
                // ProxyType: 0 none, 1 manual, 2 PAC, 3 WPAD, 4 from the environment.
                switch fields["ProxyType"] {
                case "1":
                    let address = fields["httpsProxy"] ?? fields["httpProxy"] ?? "?"
                    desktop.append("KDE: manual proxy \(ProxyEnvironmentProbe.withoutCredentials(address.replacing(" ", with: ":")))")
                case "2": desktop.append("KDE: automatic proxy configuration \(ProxyEnvironmentProbe.withoutCredentials(fields["Proxy Config Script"] ?? ""))")
                case "3": desktop.append("KDE: automatic proxy discovery (WPAD)")
                default: break
                }
            }
            // dconf's GVDB file is binary; the key names and string values are stored in clear.
            if let database = context.attemptIfPresent({ () throws(HostReadError) in try host.read(home + "/.config/dconf/user", limit: 1024 * 1024) }) {
                let bytes = String(decoding: database, as: UTF8.self)
                if bytes.contains("/system/proxy/") {
                    let mode = bytes.contains("manual") ? "manual" : bytes.contains("auto") ? "automatic" : "unknown"
                    desktop.append("GNOME: proxy settings in dconf (mode \(mode))")
                }
            }
        }
        context.emit("proxy.desktop", desktop)

        let interfaces = context.attemptIfPresent { () throws(HostReadError) in try host.listDirectory("/sys/class/net") } ?? []
        context.emit("proxy.tunnel_interfaces", interfaces.filter { name in ["tun", "wg", "ppp", "tap"].contains { name.hasPrefix($0) } })
    }
}
