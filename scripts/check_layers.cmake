# Fails when a source includes a header of a layer above its own.
#   cmake -DROOT=<source tree> -P scripts/check_layers.cmake
# Layers, lowest first; a file may include its own layer and any below it.
set(LAYERS
  runtime/core runtime/kernels runtime/checkpoint runtime/model runtime/data runtime/optim comm offload
  runtime/config runtime/tokenize shard runtime/telemetry runtime/engine proto runtime/coordinator cmd)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source tree>")
endif()

# The layer index of a path relative to ROOT (-1 for none).
function(layer_of path out)
  set(index 0)
  set(found -1)
  foreach(layer ${LAYERS})
    if(path MATCHES "^${layer}/")
      set(found ${index})
    endif()
    math(EXPR index "${index} + 1")
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

set(violations "")
foreach(layer ${LAYERS})
  file(GLOB_RECURSE sources RELATIVE ${ROOT} ${ROOT}/${layer}/*.h ${ROOT}/${layer}/*.cc ${ROOT}/${layer}/*.cu
       ${ROOT}/${layer}/*.inc)
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
endforeach()
if(violations)
  message(FATAL_ERROR "includes that climb a layer (order: ${LAYERS}):\n${violations}")
endif()
