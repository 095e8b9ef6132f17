import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyProbes

/// How an object came in (preloaded before `main` or loaded while the program ran), told from
/// the loader's list order, and where a run-time object lives.
@Suite struct ObjectArrivalTests {
    typealias Object = ObjectArrival.Object
    static func object(_ path: String, _ soname: String, _ needed: [String], infrastructure: Bool = false) -> Object {
        Object(path: path, soname: soname, needed: needed, isLoaderInfrastructure: infrastructure)
    }
    static let program = object("[main]", "", ["libm.so.6", "libc.so.6"])
    static let vdso = object("linux-vdso.so.1", "linux-vdso.so.1", [], infrastructure: true)
    static let libm = object("/lib/x86_64-linux-gnu/libm.so.6", "libm.so.6", ["libc.so.6"])
    static let libc = object("/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6", ["ld-linux-x86-64.so.2"])
    static let loader = object("/lib64/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2", [], infrastructure: true)

    @Test func aProgramAndItsDependenciesArriveAtStartUp() {
        let arrival = ObjectArrival([Self.program, Self.vdso, Self.libm, Self.libc, Self.loader])
        #expect(arrival.preloaded.isEmpty)
        #expect(arrival.loadedAtRunTime.isEmpty)
    }

    @Test func anObjectNothingAsksForBeforeTheLastDependencyWasPreloaded() {
        // As glibc lists LD_PRELOAD=/tmp/hook.so, which needs librt: the preload right after the
        // vDSO, its own dependency after the program's. Both came in with the preload.
        let hook = Self.object("/tmp/hook.so", "", ["librt.so.1", "libc.so.6"])
        let librt = Self.object("/lib/x86_64-linux-gnu/librt.so.1", "librt.so.1", ["libc.so.6"])
        let arrival = ObjectArrival([Self.program, Self.vdso, hook, Self.libm, Self.libc, Self.loader, librt])
        #expect(arrival.preloaded == [2, 6])
        #expect(arrival.loadedAtRunTime.isEmpty)
    }

    /// A preload that takes a dependency's file name, an infrastructure name, or names itself as
    /// needed is still a preload: names resolve to sonames first, as the loader's do, and the vDSO
    /// and the loader are known by address.
    @Test(arguments: [
        ObjectArrivalTests.object("/tmp/x/libc.so.6", "", ["libc.so.6"]),
        ObjectArrivalTests.object("/tmp/x/ld-linux-x86-64.so.2", "", []),
        ObjectArrivalTests.object("/tmp/x/linux-vdso.so.1", "", []),
        ObjectArrivalTests.object("/tmp/x/libself.so", "libself.so", ["libself.so"]),
    ])
    func aPreloadCannotPassForADependencyByItsName(_ hook: ObjectArrival.Object) {
        let arrival = ObjectArrival([Self.program, Self.vdso, hook, Self.libm, Self.libc, Self.loader])
        #expect(arrival.preloaded == [2], "\(hook.path)")
    }

    /// A preload that takes the soname of a library the program's libraries need, and loads the
    /// real one by path: the loader answers the name with the preload, but it stands before the
    /// library that needs it, and two start-up objects carry one soname.
    @Test func aPreloadThatTakesADependencysSonameIsNamed() {
        let program = Self.object("[main]", "", ["libfingerly.so.0", "libc.so.6"])
        let impostor = Self.object("/tmp/x/libsqlite3.so.0", "libsqlite3.so.0", ["/tmp/x/real/libsqlite3.so.0", "libc.so.6"])
        let fingerly = Self.object("/opt/lib/libfingerly.so.0", "libfingerly.so.0", ["libsqlite3.so.0", "libc.so.6"])
        let real = Self.object("/tmp/x/real/libsqlite3.so.0", "libsqlite3.so.0", ["libc.so.6"])
        let arrival = ObjectArrival([program, Self.vdso, impostor, fingerly, Self.libc, Self.loader, real])
        #expect(arrival.preloaded == [2])
        #expect(arrival.duplicateSonames == ["libsqlite3.so.0"])
        // As the loader lists the same program without the impostor: nothing to name.
        let plain = ObjectArrival([program, Self.vdso, fingerly, Self.libc, Self.loader,
                                   Self.object("/lib/x86_64-linux-gnu/libsqlite3.so.0", "libsqlite3.so.0", ["libc.so.6"])])
        #expect(plain.preloaded.isEmpty && plain.duplicateSonames.isEmpty)
    }

    @Test func twoPreloadsThatNeedEachOtherAreBothNamed() {
        let first = Self.object("/tmp/a.so", "a.so", ["b.so"]), second = Self.object("/tmp/b.so", "b.so", ["a.so"])
        let arrival = ObjectArrival([Self.program, Self.vdso, first, second, Self.libm, Self.libc, Self.loader])
        #expect(arrival.preloaded == [2, 3])
    }

    /// CMake links a library without a soname by its path, and the program's DT_NEEDED then
    /// carries that path.
    @Test func aDependencyNeededByItsPathIsNoPreload() {
        let program = Self.object("[main]", "", ["nosoname/libfoo.so", "libc.so.6"])
        let foo = Self.object("nosoname/libfoo.so", "", ["libc.so.6"])
        let arrival = ObjectArrival([program, Self.vdso, foo, Self.libc, Self.loader])
        #expect(arrival.preloaded.isEmpty)
    }

    /// A plugin's private copy of a library the program loaded at start-up resolves to nothing
    /// the program needs: it cannot move the start-up range.
    @Test func aPrivateCopyLoadedAtRunTimeDoesNotMoveTheBoundary() {
        let plugin = Self.object("/opt/app/plugins/plugin.so", "", ["libm.so.6"])
        let copy = Self.object("/opt/app/private/libm.so.6", "libm.so.6", [])
        let arrival = ObjectArrival([Self.program, Self.vdso, Self.libm, Self.libc, Self.loader, plugin, copy])
        #expect(arrival.preloaded.isEmpty)
        #expect(arrival.loadedAtRunTime == [5, 6])
    }

    /// A list at the probe's limits (1,024 objects, 8,192 needed names) whose start-up range grows
    /// one object at a time: each preload needs the next, as the reviewer's list did.
    @Test func aListAtTheLimitsGrowingOneObjectAtATime() {
        let names = (0..<1024).map { "lib\($0).so" }
        var objects = [Self.object("[main]", "", [names[1]])]
        for index in 1..<1024 {
            objects.append(Self.object("/tmp/\(names[index])", names[index], (0..<8).map { names[min(1023, index + 1 + $0)] }))
        }
        // main reaches lib1, which reaches the rest: nothing is a preload, nothing came later.
        let arrival = ObjectArrival(objects)
        #expect(arrival.preloaded.isEmpty && arrival.loadedAtRunTime.isEmpty)
        objects[0] = Self.object("[main]", "", [])
        let unasked = ObjectArrival(objects + [Self.object("[late]", "late.so", [])])
        #expect(unasked.preloaded.isEmpty && unasked.loadedAtRunTime.count == 1024)
    }

    @Test func whatFollowsTheStartUpObjectsWasLoadedAtRunTime() {
        // Python's extension modules and their own dependencies, and this library through ctypes.
        let json = Self.object("/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", "", ["libc.so.6"])
        let ctypes = Self.object("/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", "", ["libffi.so.8"])
        let ffi = Self.object("/lib/x86_64-linux-gnu/libffi.so.8", "libffi.so.8", ["libc.so.6"])
        let arrival = ObjectArrival([Self.program, Self.vdso, Self.libm, Self.libc, Self.loader, json, ctypes, ffi])
        #expect(arrival.preloaded.isEmpty)
        #expect(arrival.loadedAtRunTime == [5, 6, 7])
    }

    @Test func aPreloadAndRunTimeObjectsAreToldApart() {
        let hook = Self.object("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "libfaketime.so.1", ["libc.so.6"])
        let plugin = Self.object("/opt/app/lib/plugins/libcodec.so", "libcodec.so", ["libm.so.6"])
        let arrival = ObjectArrival([Self.program, Self.vdso, hook, Self.libm, Self.libc, Self.loader, plugin])
        #expect(arrival.preloaded == [2])
        #expect(arrival.loadedAtRunTime == [6])
    }

    @Test func aRunTimeObjectThatNeedsAStartUpObjectDoesNotMoveTheBoundary() {
        // A plugin needing libm: libm was loaded at start-up, and stays there in the list.
        let plugin = Self.object("/tmp/_MEI12345/libplugin.so", "", ["libm.so.6"])
        let arrival = ObjectArrival([Self.program, Self.vdso, Self.libm, Self.libc, Self.loader, plugin])
        #expect(arrival.loadedAtRunTime == [5])
        #expect(arrival.preloaded.isEmpty)
    }

    @Test func anEmptyListHasNothingToTell() {
        let arrival = ObjectArrival([])
        #expect(arrival.preloaded.isEmpty && arrival.loadedAtRunTime.isEmpty)
    }

    @Test(arguments: [
        ("/usr/lib/python3.11/lib-dynload/_json.so", ObjectPlace.system),
        ("/lib/x86_64-linux-gnu/security/pam_unix.so", .system),
        ("/usr/local/lib/libplugin.so", .system),
        ("/opt/app/lib/plugins/libcodec.so", .program),
        ("/tmp/_MEI12345/libpython3.11.so.1.0", .temporary),
        ("/dev/shm/x.so", .temporary),
        ("/usr/lib/../../tmp/hook.so", .temporary),
        ("/memfd:payload (deleted)", .memory),
        ("/proc/self/fd/7", .memory),
        ("/gone/libold.so", .deleted),
        ("/home/alice/.venv/lib/python3.11/site-packages/_cffi_backend.so", .other),
    ])
    func aRunTimeObjectsPlace(_ path: String, _ place: ObjectPlace) {
        #expect(ObjectPlace.of(path, programPath: "/opt/app/bin/app") { !$0.hasPrefix("/gone/") } == place)
    }

    @Test func aProgramAtTheTopHasNoTreeOfItsOwn() {
        #expect(ObjectPlace.installationTree(of: "/app") == nil)
        #expect(ObjectPlace.installationTree(of: "/usr/bin/python3") == "/usr")
        #expect(ObjectPlace.installationTree(of: "/opt/tool/tool") == "/opt/tool")
    }

    /// This test process opens a library itself: an object loaded at run time, never preloaded.
    @Test func aLibraryThisProcessOpensIsReportedAsLoadedAtRunTime() throws {
        let candidates = ["libz.so.1", "libbz2.so.1.0", "liblzma.so.5", "libexpat.so.1", "libffi.so.8"]
        let name = try #require(candidates.first { name in
            dlopen(name, RTLD_NOW | RTLD_NOLOAD) == nil && FileManager.default.fileExists(atPath: "/lib/x86_64-linux-gnu/" + name)
        }, "one of \(candidates) is installed and not yet loaded")
        let handle = try #require(dlopen("/lib/x86_64-linux-gnu/" + name, RTLD_NOW))
        defer { dlclose(handle) }
        let loaded = LoadedObjectsProbe.loadedObjects()
        let arrival = loaded.arrival
        let index = try #require(loaded.objects.firstIndex { $0.path.hasSuffix("/" + name) })
        #expect(arrival.loadedAtRunTime.contains(index))
        if ProcessInfo.processInfo.environment["LD_PRELOAD"] == nil {
            #expect(arrival.preloaded.isEmpty, "\(arrival.preloaded.map { loaded.objects[$0].path })")
        }
    }
}
