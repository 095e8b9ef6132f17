#if canImport(Glibc)
import Glibc
#endif

extension Fingerly {
    /// Why `directory` cannot hold this user's state (made when missing, as any use of it would),
    /// nil when it can. The CLI and the C configuration ask this of a state directory the caller
    /// named, so a name that cannot work is refused up front instead of silently degrading to
    /// identifiers keyed per run.
    package static func stateDirectoryProblem(_ directory: String) -> String? {
        switch StateDirectory.openOwned(directory) {
        case .success(let directoryFd):
            close(directoryFd)
            return nil
        case .failure(let problem):
            return problem.description
        }
    }
}
