import FingerlyHost
import FingerlyModel

/// Calls to sensitive functions that do not reach the library defining them: an LD_PRELOAD or
/// ld.so.preload object interposed itself, or an injected one rewrote an object's GOT slots.
/// The loader's list of objects names the object the call really reaches.
package struct SymbolInterpositionProbe: Probe {
    package let id = "symbol-interposition"
    static let libc = ("libc.so.6", ["open", "openat", "read", "fopen", "connect", "getenv", "ptrace", "dlsym", "write", "readlink",
                                     "dlopen", "dladdr", "dl_iterate_phdr", "clock_gettime"])
    /// Checked only when libssl is loaded in this process.
    static let libssl = ("libssl.so.3", ["SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex"])

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's symbol bindings; a root tree has none") }
        // First, since it reads the relocations without asking the loader anything: a rewritten
        // slot that falsifies the look-ups below still shows here.
        context.emit("loader.redirected_got_slots", Self.redirectedSlots(context))
        // This process is linked against libc: not finding it means the look-up was falsified.
        let libcFound = ProcessIntegrity.isLoaded(Self.libc.0)
        context.emit("loader.libc_lookup_failed", !libcFound)
        guard libcFound else { return }
        var interposed: [String] = []
        var ownDefinitions: [String] = []
        for (library, symbols) in [Self.libc, Self.libssl] {
            for symbol in symbols {
                switch ProcessIntegrity.symbolOrigin(of: symbol, in: library) {
                case .interposed(let path): interposed.append("\(symbol) -> \(path.isEmpty ? "an unnamed mapping" : path)")
                case .definedByProgram: ownDefinitions.append(symbol)
                case .definingLibrary, .undefined: break
                }
            }
        }
        context.emit("loader.interposed_symbols", interposed)
        context.emit("loader.program_defined_symbols", ownDefinitions)
    }


    /// Patching a GOT slot redirects one object's calls and leaves every global lookup, and the
    /// library's code, as they were. A slot may lead into its own object (not yet bound), the
    /// library that defines the symbol, where a global lookup lands, or an object of its own
    /// dependency closure (a wheel's bundled OpenSSL); this code's own slots, for every symbol,
    /// also into the objects loaded at start-up. Anything else was rewritten.
    static func redirectedSlots(_ context: ProbeContext) -> [String] {
        let loaded = LoadedObjectsProbe.loadedObjects()
        let objects = loaded.objects.map {
            ObjectArrival.Object(path: $0.path, soname: $0.soname, needed: $0.needed, isLoaderInfrastructure: $0.isLoaderInfrastructure)
        }
        let names = NeededNames(objects)
        let indexByStart = Dictionary(loaded.objects.enumerated().map { ($1.rangeStart, $0) }, uniquingKeysWith: { first, _ in first })
        func describe(_ slot: RedirectedSlot) -> String {
            "\(slot.symbol) in the GOT of \(slot.object) -> \(slot.target.isEmpty ? "unnamed memory" : slot.target)"
        }
        func note(_ found: Int, _ named: Int, _ whose: String) {
            if found == ProcessIntegrity.tooManyObjects {
                context.recordMalformed("GOT of loaded objects", "more than 1,024 objects are loaded: the slots \(whose) were not judged")
            } else if found > named { context.recordMalformed("GOT of loaded objects", "\(found) redirected slots \(whose); the first \(named) are named") }
        }
        var redirected: [String] = []
        for (library, symbols) in [Self.libc, Self.libssl] {
            guard let (slots, found) = ProcessIntegrity.redirectedSlots(of: symbols, in: library) else { continue }
            for slot in slots {
                // An owner the listing does not know was loaded between the two walks: nothing to judge it by.
                guard let owner = indexByStart[slot.ownerStart] else { continue }
                if let target = indexByStart[slot.targetStart], names.closure(from: owner).contains(target) { continue }
                redirected.append(describe(slot))
            }
            note(found, slots.count, "for \(library)")
        }
        let own = ProcessIntegrity.ownObjectStart
        if let ownIndex = indexByStart[own] {
            let arrival = ObjectArrival(objects)
            let runTime = Set(arrival.loadedAtRunTime)
            let accepted = Set(names.closure(from: ownIndex)).union(objects.indices.filter { !runTime.contains($0) })
            if let (slots, found) = ProcessIntegrity.redirectedOwnSlots(accepted: accepted.map { loaded.objects[$0].rangeStart }) {
                redirected += slots.map(describe)
                note(found, slots.count, "of this library")
            }
        }
        return redirected
    }
}
