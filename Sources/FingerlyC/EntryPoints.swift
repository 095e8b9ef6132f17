import FoundationEssentials
import Fingerly
import FingerlyHost
import FingerlyModel
#if canImport(Glibc)
import Glibc
#endif

// The functions of include/fingerly.h. Each one turns every failure into a fingerly_error and a
// negative result: nothing thrown, and no argument a C caller can pass reaches a trap. They are
// public only so a release build's dead stripping keeps them; the version script exports them
// and hides every Swift symbol.

/// Lives as long as the process: `fingerly_version` hands out a pointer into it.
nonisolated(unsafe) private let versionText: UnsafeMutablePointer<CChar> = strdup(Fingerly.version)

@_cdecl("fingerly_version")
public func fingerlyVersion() -> UnsafePointer<CChar> {
    UnsafePointer(versionText)
}

@_cdecl("fingerly_free")
public func fingerlyFree(_ text: UnsafeMutablePointer<CChar>?) {
    free(text)
}

@_cdecl("fingerly_load")
public func fingerlyLoad(_ configJSON: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                  _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        guard let out else { throw .configuration("out is NULL") }
        out.pointee = nil
        let configuration = try CConfiguration.decode(Array((try text(configJSON, "config_json", optional: true) ?? "").utf8))
        let loaded = try blocking { try await configuration.load() }.get()
        out.pointee = Handles.open(loaded)
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

@_cdecl("fingerly_close")
public func fingerlyClose(_ handle: OpaquePointer?) {
    guard let handle else { return }
    Handles.close(handle)
}

@_cdecl("fingerly_identify")
public func fingerlyIdentify(_ handle: OpaquePointer?, _ tag: UnsafePointer<CChar>?, _ tiers: UInt32, _ submit: Bool,
                      _ resultJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        let slot = try resultSlot(resultJSON, "result_json")
        let fingerly = try instance(handle)
        slot.pointee = try identifyJSON(fingerly, try text(tag, "tag", optional: true), try tierSet(tiers), submit)
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

/// The identify both entry points share: the call made, the result encoded.
func identifyJSON(_ fingerly: Fingerly, _ tagText: String?, _ tierChoice: Set<Tier>?, _ submit: Bool) throws(CallFailure)
    -> UnsafeMutablePointer<CChar> {
    let result = try blocking { try await fingerly.identify(tag: tagText, tiers: tierChoice, submit: submit) }.get()
    return try mallocCopy(try encoded(result))
}

@_cdecl("fingerly_collect")
public func fingerlyCollect(_ handle: OpaquePointer?, _ tag: UnsafePointer<CChar>?, _ tiers: UInt32,
                     _ reportJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        let slot = try resultSlot(reportJSON, "report_json")
        let fingerly = try instance(handle)
        let tagText = try text(tag, "tag", optional: true)
        let tierChoice = try tierSet(tiers)
        let report = try blocking { try await fingerly.collect(tag: tagText, tiers: tierChoice) }.get()
        slot.pointee = try mallocCopy(try encoded(report))
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

@_cdecl("fingerly_check_integrity")
public func fingerlyCheckIntegrity(_ handle: OpaquePointer?, _ tiers: UInt32,
                            _ resultJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        let slot = try resultSlot(resultJSON, "result_json")
        let fingerly = try instance(handle)
        let tierChoice = try tierSet(tiers) ?? [.fast]
        let result = try blocking { try await fingerly.checkIntegrity(tiers: tierChoice) }.get()
        slot.pointee = try mallocCopy(try encoded(result))
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

@_cdecl("fingerly_set_consent")
public func fingerlySetConsent(_ handle: OpaquePointer?, _ consent: UnsafePointer<CChar>?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        let fingerly = try instance(handle)
        fingerly.setConsent(try CConfiguration.consentState(try text(consent, "consent") ?? ""))
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

@_cdecl("fingerly_flush")
public func fingerlyFlush(_ handle: OpaquePointer?, _ resultJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
                   _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        resultJSON?.pointee = nil
        let fingerly = try instance(handle)
        let result = try blocking { try await fingerly.flush() }.get()
        if let resultJSON { resultJSON.pointee = try mallocCopy(try encoded(result)) }
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

@_cdecl("fingerly_clear_device_identity")
public func fingerlyClearDeviceIdentity(_ handle: OpaquePointer?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        let fingerly = try instance(handle)
        do {
            try fingerly.clearDeviceIdentity()
        } catch let failure {
            throw CallFailure(failure)
        }
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}

/// What an asynchronous call hands its thread: the C caller's callback and pointer, opaque here.
private struct CallbackTarget: @unchecked Sendable {
    let callback: @convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Void
    let user: UnsafeMutableRawPointer?
}

@_cdecl("fingerly_identify_async")
public func fingerlyIdentifyAsync(_ handle: OpaquePointer?, _ tag: UnsafePointer<CChar>?, _ tiers: UInt32, _ submit: Bool,
                           _ callback: (@convention(c) (Int32, UnsafePointer<CChar>?, UnsafeRawPointer?, UnsafeMutableRawPointer?) -> Void)?,
                           _ user: UnsafeMutableRawPointer?, _ record: UnsafeMutableRawPointer?) -> Int32 {
    do throws(CallFailure) {
        guard let callback else { throw .configuration("callback is NULL") }
        let fingerly = try instance(handle)
        // Read now: the caller's tag need not outlive this call.
        let tagText = try text(tag, "tag", optional: true)
        let tierChoice = try tierSet(tiers)
        let target = CallbackTarget(callback: callback, user: user)
        // The thread holds the instance: a fingerly_close meanwhile leaves it alive.
        let started = startDetachedThread {
            let callbackRecord = UnsafeMutableRawPointer.allocate(byteCount: ErrorRecord.size, alignment: 4)
            defer { callbackRecord.deallocate() }
            do throws(CallFailure) {
                let json = try identifyJSON(fingerly, tagText, tierChoice, submit)
                defer { free(json) }
                ErrorRecord.write(nil, to: callbackRecord)
                target.callback(0, UnsafePointer(json), UnsafeRawPointer(callbackRecord), target.user)
            } catch {
                let code = ErrorRecord.finish(error, callbackRecord)
                target.callback(code, nil, UnsafeRawPointer(callbackRecord), target.user)
            }
        }
        guard started else {
            throw CallFailure(kind: CallFailure.internalKind, message: "cannot start a thread for the call")
        }
        return ErrorRecord.finish(nil, record)
    } catch {
        return ErrorRecord.finish(error, record)
    }
}
