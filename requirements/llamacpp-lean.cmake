# Included by requirements/llamacpp.txt right after llama.cpp's own project() (CMAKE_PROJECT_llama.cpp_INCLUDE):
# llama.cpp's common library (and the cpp-httplib it links) is for llama.cpp's command-line tools, and the Python
# binding loads only libllama and libggml*. llama-cpp-python's CMakeLists.txt forces LLAMA_BUILD_COMMON on in the cache,
# which -D cannot undo; a normal variable in llama.cpp's directory scope wins over that cache entry (CMP0077: option()
# keeps it). Half of the build's compile time was this library (measured: 598 s of 1,317 s of compile jobs).
set(LLAMA_BUILD_COMMON OFF)
