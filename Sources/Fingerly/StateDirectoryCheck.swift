#if canImport(Glibc)
import Glibc
#endif
import FingerlyHost

extension Fingerly {
    /// Why `directory` cannot hold this user's state, nil when it can. The CLI and the C
    /// configuration ask this of a state directory the caller named, so a name that cannot work
    /// is refused up front instead of silently degrading to identifiers keyed per run. What the
    /// check makes it removes again: a run that needs no state (an API key, `--no-submit`)
    /// leaves nothing behind.
    package static func stateDirectoryProblem(_ directory: String) -> String? {
        guard directory.hasPrefix("/") else { return "\(directory): not an absolute path" }
        var made: [String] = []
        defer { for path in made.reversed() { rmdir(path) } }
        var prefix = ""
        for component in directory.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) == 0 {
                made.append(prefix)
            } else if errno != EEXIST {
                return "\(prefix): \(SystemError(errno))"
            }
        }
        switch StateDirectory.openOwned(directory) {
        case .success(let directoryFd):
            close(directoryFd)
            return nil
        case .failure(let problem):
            return problem.description
        }
    }
}
