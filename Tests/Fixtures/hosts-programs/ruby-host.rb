# A Ruby program that loads libfingerly.so.0 through Fiddle, after its own extension modules, and
# asks about itself. Run by HostProgramMatrixTests with FINGERLY_LIBRARY naming the library; prints
# "integrity <IntegrityResult JSON>" and "identify <IdentifyResult JSON>", both of the fast tier.
require 'fiddle'
require 'json'
require 'openssl'
require 'socket'
require 'zlib'

# Use the extension modules once, so their shared objects are in use.
raise 'zlib' unless Zlib.inflate(Zlib.deflate('matrix')) == 'matrix'
raise 'openssl' unless OpenSSL::Digest.new('SHA256').hexdigest('') =~ /\Ae3b0c442/

library = Fiddle.dlopen(ENV.fetch('FINGERLY_LIBRARY'))
pointer = Fiddle::TYPE_VOIDP
int = Fiddle::TYPE_INT
unsigned = -Fiddle::TYPE_INT
# C's bool is passed as a byte; Fiddle 1.1 has no TYPE_BOOL.
bool = Fiddle::TYPE_CHAR
fingerly_load = Fiddle::Function.new(library['fingerly_load'], [pointer, pointer, pointer], int)
fingerly_check_integrity = Fiddle::Function.new(library['fingerly_check_integrity'],
                                                [pointer, unsigned, pointer, pointer], int)
fingerly_identify = Fiddle::Function.new(library['fingerly_identify'],
                                         [pointer, pointer, unsigned, bool, pointer, pointer], int)
fingerly_free = Fiddle::Function.new(library['fingerly_free'], [pointer], Fiddle::TYPE_VOID)
fingerly_close = Fiddle::Function.new(library['fingerly_close'], [pointer], Fiddle::TYPE_VOID)
FAST_TIER = 1

# fingerly_error: int kind, int status, bool retryable, char message[256]; 268 bytes with padding.
error = Fiddle::Pointer.malloc(268, Fiddle::RUBY_FREE)
message_of = ->(record) { record[9, 256].unpack1('Z*') }
check = lambda do |name, rc|
  raise "#{name}: rc #{rc}, kind #{error[0, 4].unpack1('l')}: #{message_of.call(error)}" unless rc.zero?
end
take_json = lambda do |slot|
  text = slot.ptr.to_s
  fingerly_free.call(slot.ptr)
  JSON.parse(text)
end

handle_slot = Fiddle::Pointer.malloc(Fiddle::SIZEOF_VOIDP, Fiddle::RUBY_FREE)
config = JSON.generate({ 'apiKey' => nil, 'consent' => 'granted' })
check.call('fingerly_load', fingerly_load.call(config, handle_slot, error))
handle = handle_slot.ptr

result_slot = Fiddle::Pointer.malloc(Fiddle::SIZEOF_VOIDP, Fiddle::RUBY_FREE)
check.call('fingerly_check_integrity', fingerly_check_integrity.call(handle, FAST_TIER, result_slot, error))
integrity = take_json.call(result_slot)
raise "no tampering verdict in #{integrity.keys}" unless [true, false].include?(integrity.dig('tampering', 'value'))
puts "integrity #{JSON.generate(integrity)}"

check.call('fingerly_identify', fingerly_identify.call(handle, 'ruby-fiddle', FAST_TIER, 0, result_slot, error))
puts "identify #{JSON.generate(take_json.call(result_slot))}"
fingerly_close.call(handle)
