// libFuzzer: arbitrary bytes as a tokenizer.json through Tokenizer::from_hf_json, then
// encode/decode of a few texts (and of the input itself) with the tokenizer it built.
// Only nunchaku::Error may escape loading; encode/decode must not throw or crash on
// any text, and every id encode returns must be inside the vocabulary.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    nunchaku::Tokenizer tok = nunchaku::Tokenizer::from_hf_json(bytes, "fuzz/tokenizer.json");
    for (std::string_view text : {std::string_view("Hello, world! 123 don't  \t\n"), std::string_view("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 <s></s>"),
                                  bytes.substr(0, 256)}) {
      for (int flags = 0; flags < 4; ++flags) {
        auto ids = tok.encode(text, flags & 1, flags & 2);
        for (int32_t id : ids)
          if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
        (void)tok.decode(ids, false);
        (void)tok.decode(ids, true);
        nunchaku::StreamDecoder sd(tok);
        for (int32_t id : ids) (void)sd.push(id);
        (void)sd.flush();
      }
    }
    const int32_t probe[] = {-1, 0, 1, 2, 255, 1 << 30};
    (void)tok.decode(probe, false);
    if (auto fmt = tok.chat_format()) (void)tok.apply_chat(*fmt, {{"system", "s"}, {"user", "u"}, {"assistant", "a"}}, true);
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
