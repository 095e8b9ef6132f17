import CFingerlyIntegrity

/// What a forked child met when it asked to be traced.
package enum TraceMeOutcome: Sendable, Hashable {
    /// The child could become traced: nothing traces this process's children.
    case allowed
    /// PTRACE_TRACEME failed in the child with this error (EPERM: something already traces it).
    case refused(SystemError)
    /// The test could not run: fork or wait failed, or the child did not exit normally.
    case notRun
}

/// One object the dynamic loader has mapped into this process.
package struct LoadedObject: Sendable, Hashable {
    /// As the loader names it; "[main]" for the program itself.
    package let path: String
    /// DT_SONAME; empty without one.
    package let soname: String
    /// DT_NEEDED names.
    package let needed: [String]
    /// The path, the soname or a needed name was longer than its field and is shown cut.
    package let hasTruncatedName: Bool
    /// The vDSO or the dynamic loader, by the addresses the kernel gave.
    package var isLoaderInfrastructure = false
    /// Where the object's segments start: how a GOT slot's owner and target are named.
    package var rangeStart: UInt = 0
}

/// The loader's list as far as it was taken.
package struct LoadedObjectList: Sendable {
    package let objects: [LoadedObject]
    /// Objects the loader listed, taken or not.
    package let objectsFound: Int
    /// DT_NEEDED entries the loader's objects carry, and how many were taken.
    package let neededFound: Int
    package let neededTaken: Int

    /// Some objects or needed names were left out: more than the limits allow.
    package var isCut: Bool { objects.count < objectsFound || neededTaken < neededFound }
}

/// How the code at an address compares with the file it was mapped from.
package struct CodeComparison: Sendable, Hashable {
    /// The mapped file.
    package let path: String
    package let memory: [UInt8]
    package let disk: [UInt8]
    package let matches: Bool
}

/// Where a global lookup of a symbol lands, against the library meant to define it.
package enum SymbolOrigin: Sendable, Hashable {
    /// The library is not loaded or does not define the symbol.
    case undefined
    /// Calls reach the library's own definition.
    case definingLibrary
    /// The program defines the symbol itself, and calls reach its definition.
    case definedByProgram
    /// Calls reach another object, named by its path (empty for an unnamed mapping).
    case interposed(by: String)
}

/// A GOT slot that sends a watched symbol's calls away from its library (fingerly_redirected_slots).
package struct RedirectedSlot: Sendable, Hashable {
    package let symbol: String
    /// The object whose GOT holds the slot; "[main]" for the program.
    package let object: String
    /// The object the slot points into; empty for memory no object was loaded from.
    package let target: String
    /// The owner's and the target's `LoadedObject.rangeStart` (0: in no object).
    package let ownerStart: UInt
    package let targetStart: UInt
}

/// What code new to this thread cost against a loop run before it, in CPU time of this thread.
package struct CodeCost: Sendable, Hashable {
    package let freshCodeCPUNanoseconds: Int64
    package let referenceCPUNanoseconds: Int64
    package let wallNanoseconds: Int64
    package let cpuClockResolutionNanoseconds: Int64

    package init(freshCodeCPUNanoseconds: Int64, referenceCPUNanoseconds: Int64, wallNanoseconds: Int64,
                 cpuClockResolutionNanoseconds: Int64) {
        self.freshCodeCPUNanoseconds = freshCodeCPUNanoseconds
        self.referenceCPUNanoseconds = referenceCPUNanoseconds
        self.wallNanoseconds = wallNanoseconds
        self.cpuClockResolutionNanoseconds = cpuClockResolutionNanoseconds
    }
}

/// This process as the loader, the kernel and its own code see it.
package enum ProcessIntegrity {
    package static func traceMeSelfTest() -> TraceMeOutcome {
        switch fingerly_traceme_selftest() {
        case 0: return .allowed
        case let code where code > 0: return .refused(SystemError(code))
        default: return .notRun
        }
    }

    /// The dynamic loader's debugger hook (`_r_debug.r_brk`), where gdb plants a breakpoint.
    package static var loaderBreakpointAddress: UnsafeRawPointer? {
        fingerly_loader_breakpoint_address().map { UnsafeRawPointer($0) }
    }

    /// The entry of a C function of this library (fingerly_raw_read_file), watched for breakpoints.
    package static var shimEntry: UnsafeRawPointer? {
        fingerly_shim_entry().map { UnsafeRawPointer($0) }
    }

    /// Reads at most `capacity` bytes of a file with raw system calls, so an LD_PRELOAD hook on
    /// open/read cannot filter what comes back. Not confined to any root: live-host paths only.
    package static func readBypassingLibc(_ path: String, capacity: Int) throws(SystemError) -> [UInt8] {
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            let count = buffer.withMemoryRebound(to: CChar.self) { fingerly_raw_read_file(path, $0.baseAddress, capacity) }
            if count < 0 { failure = Int32(truncatingIfNeeded: -count); initialized = 0 } else { initialized = count }
        }
        guard failure == 0 else { throw SystemError(failure) }
        return bytes
    }

    /// Redirected slots reported at most; more are counted.
    package static let redirectedSlotLimit = 16
    /// `found` when more objects are loaded than a walk places (fingerly_redirected_slots' -3).
    package static let tooManyObjects = -3

    /// The GOT slots of every loaded object that send one of `symbols` somewhere else than the
    /// object itself, `library` or a global lookup's answer; nil when `library` is not loaded or
    /// this architecture's relocations are not read. `found` counts past the limit, and is
    /// `tooManyObjects` when more objects are loaded than the walk can place.
    package static func redirectedSlots(of symbols: [String], in library: String) -> (slots: [RedirectedSlot], found: Int)? {
        slots { fingerly_redirected_slots(symbols.joined(separator: "\n"), library, $0, $1) }
    }

    /// The GOT slots of the object holding this code, for every symbol, that point neither into it,
    /// nor into an object of `accepted` (range starts), nor where a global lookup lands.
    package static func redirectedOwnSlots(accepted: [UInt]) -> (slots: [RedirectedSlot], found: Int)? {
        accepted.withUnsafeBufferPointer { accepted in
            slots { fingerly_redirected_own_slots(accepted.baseAddress, accepted.count, $0, $1) }
        }
    }

    /// The range start of the object holding this code.
    package static var ownObjectStart: UInt { fingerly_own_object_start() }

    private static func slots(_ walk: (UnsafeMutablePointer<fingerly_redirected_slot>?, Int) -> Int) -> (slots: [RedirectedSlot], found: Int)? {
        // A buffer, not an array of the C type: the array's metadata is looked up by name at run time, a search of
        // every type the binary holds.
        let entries = UnsafeMutablePointer<fingerly_redirected_slot>.allocate(capacity: redirectedSlotLimit)
        defer { entries.deallocate() }
        let found = walk(entries, redirectedSlotLimit)
        if found == tooManyObjects { return ([], tooManyObjects) }
        guard found >= 0 else { return nil }
        let redirected = (0..<min(found, redirectedSlotLimit)).map { index in
            let slot = entries + index
            let object = text { fingerly_redirected_slot_object(slot, $0) }
            return RedirectedSlot(symbol: text { fingerly_redirected_slot_symbol(slot, $0) },
                                  object: object.isEmpty ? "[main]" : object,
                                  target: text { fingerly_redirected_slot_target(slot, $0) },
                                  ownerStart: slot.pointee.owner_start, targetStart: slot.pointee.target_start)
        }
        return (redirected, found)
    }

    /// Runs the fresh-code and reference workloads in the calling thread (fingerly_measure_code_cost);
    /// nil when the thread's CPU clock cannot be read.
    package static func measureCodeCost(seed: UInt64) -> CodeCost? {
        var cost = fingerly_code_cost()
        guard fingerly_measure_code_cost(seed, &cost) == 0 else { return nil }
        return CodeCost(freshCodeCPUNanoseconds: cost.blocks_cpu_ns, referenceCPUNanoseconds: cost.chain_cpu_ns,
                        wallNanoseconds: cost.wall_ns, cpuClockResolutionNanoseconds: cost.cpu_clock_resolution_ns)
    }

    /// A process maps a few hundred objects at most.
    package static let objectLimit = 1024
    package static let neededLimit = 8192
    static let firstObjectCapacity = 128
    static let firstNeededCapacity = 1024

    /// Every object the dynamic loader has mapped, with its DT_NEEDED names: at most
    /// `objectLimit` objects and `neededLimit` needed names, the rest counted (`isCut`).
    package static func loadedObjects(objectLimit: Int = objectLimit, neededLimit: Int = neededLimit) -> LoadedObjectList {
        var objectCapacity = min(max(objectLimit, 0), firstObjectCapacity)
        var neededCapacity = min(max(neededLimit, 0), firstNeededCapacity)
        while true {
            var report = fingerly_loaded_objects_report()
            var needed: [fingerly_needed_library] = []
            let objects = [fingerly_loaded_object](unsafeUninitializedCapacity: objectCapacity) { objectBuffer, objectCount in
                needed = [fingerly_needed_library](unsafeUninitializedCapacity: neededCapacity) { neededBuffer, neededCount in
                    fingerly_loaded_objects(objectBuffer.baseAddress, objectCapacity, neededBuffer.baseAddress, neededCapacity, &report)
                    neededCount = report.needed_count
                }
                objectCount = report.object_count
            }
            // The list can grow between calls (another thread's dlopen): grow to what was found,
            // within the limits, and try again until it fits or a limit is reached.
            let wantedObjects = min(objectLimit, report.objects_found), wantedNeeded = min(neededLimit, report.needed_found)
            if wantedObjects > objectCapacity || wantedNeeded > neededCapacity {
                objectCapacity = max(objectCapacity, min(objectLimit, wantedObjects + 16))
                neededCapacity = max(neededCapacity, min(neededLimit, wantedNeeded + 64))
                continue
            }
            var neededByObject = [[String]](repeating: [], count: objects.count)
            var neededTruncated = [Bool](repeating: false, count: objects.count)
            needed.withUnsafeBufferPointer { entries in
                for entry in entries.indices where entries[entry].object_index < objects.count {
                    let owner = entries[entry].object_index
                    neededByObject[owner].append(text { fingerly_needed_library_name(entries.baseAddress! + entry, $0) })
                    if entries[entry].name_truncated { neededTruncated[owner] = true }
                }
            }
            let list = objects.withUnsafeBufferPointer { entries in
                entries.indices.map { index in
                    let object = entries.baseAddress! + index
                    return LoadedObject(path: text { fingerly_loaded_object_path(object, $0) },
                                        soname: text { fingerly_loaded_object_soname(object, $0) },
                                        needed: neededByObject[index],
                                        hasTruncatedName: object.pointee.path_truncated || object.pointee.soname_truncated
                                            || neededTruncated[index],
                                    isLoaderInfrastructure: object.pointee.is_loader_infrastructure,
                                    rangeStart: object.pointee.range_start)
                }
            }
            return LoadedObjectList(objects: list, objectsFound: report.objects_found,
                                    neededFound: report.needed_found, neededTaken: needed.count)
        }
    }

    /// `symbol` inside `library` (a soname already loaded: RTLD_NOLOAD opens no file), through the
    /// loader's functions as they were when this code was loaded (fingerly_lookup_in_library).
    package static func definition(of symbol: String, in library: String) -> UnsafeRawPointer? {
        fingerly_lookup_in_library(library, symbol)
    }

    package static func isLoaded(_ library: String) -> Bool { fingerly_library_is_loaded(library) }

    /// Where a global lookup of `symbol` lands, compared with its definition inside `library`.
    package static func symbolOrigin(of symbol: String, in library: String) -> SymbolOrigin {
        var address: UnsafeRawPointer?
        var global = [CChar](repeating: 0, count: 1024)
        var inside = [CChar](repeating: 0, count: 1024)
        switch fingerly_symbol_origin(symbol, library, &address, &global, global.count, &inside, inside.count) {
        case 1: return .definingLibrary
        case 2: return .definedByProgram
        case 0: return .interposed(by: String(decoding: global.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        default: return .undefined
        }
    }

    /// The first `count` bytes of the code at `address`, in memory and in the ELF file it was
    /// mapped from; nil when the address is in no file mapping or the file cannot be read.
    package static func compareCodeWithFile(at address: UnsafeRawPointer, count: Int) -> CodeComparison? {
        var memory = [UInt8](repeating: 0, count: count)
        var disk = [UInt8](repeating: 0, count: count)
        var path = [CChar](repeating: 0, count: 1024)
        let same = fingerly_compare_code_with_file(address, &memory, &disk, count, &path, path.count)
        guard same >= 0 else { return nil }
        return CodeComparison(path: String(decoding: path.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                              memory: memory, disk: disk, matches: same == 1)
    }
}
