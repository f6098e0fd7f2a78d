# Fails when a source includes a header of a layer above its own.
#   cmake -DROOT=<source tree> -P scripts/check_layers.cmake
# Layers, lowest first; a file may include its own layer and any below it.
# runtime/kernels holds four: the backends' plumbing (cpu, cuda), each op's
# files (ops), and the tables over them (the folder itself).
set(LAYERS
  runtime/core runtime/kernels/cpu runtime/kernels/cuda runtime/kernels/ops runtime/kernels runtime/checkpoint runtime/model runtime/data runtime/optim comm offload
  shard runtime/config runtime/tokenize runtime/telemetry runtime/engine proto runtime/coordinator cmd)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source tree>")
endif()

# The layer index of a path relative to ROOT (-1 for none): the longest
# layer that holds it.
function(layer_of path out)
  set(index 0)
  set(found -1)
  set(longest 0)
  foreach(layer ${LAYERS})
    string(LENGTH "${layer}" length)
    if(path MATCHES "^${layer}/" AND length GREATER longest)
      set(found ${index})
      set(longest ${length})
    endif()
    math(EXPR index "${index} + 1")
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

set(sources "")
foreach(layer ${LAYERS})
  file(GLOB_RECURSE found RELATIVE ${ROOT} ${ROOT}/${layer}/*.h ${ROOT}/${layer}/*.cc ${ROOT}/${layer}/*.cu
       ${ROOT}/${layer}/*.cuh ${ROOT}/${layer}/*.inc)
  list(APPEND sources ${found})
endforeach()
list(REMOVE_DUPLICATES sources)
set(violations "")
foreach(src ${sources})
  layer_of(${src} mine)
  file(STRINGS ${ROOT}/${src} includes REGEX "^#include \"")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    layer_of(${header} theirs)
    if(theirs GREATER mine)
      list(GET LAYERS ${theirs} above)
      string(APPEND violations "  ${src} includes ${header} (${above} is above its layer)\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "includes that climb a layer (order: ${LAYERS}):\n${violations}")
endif()
