# CTest entry test_install: `cmake --install` into a fresh prefix, then each installed program must start
# from there (its --version) and lenet-train must train one small epoch on the CPU, far from the build tree.
# Arguments: BUILD_DIR, PREFIX (emptied first), DATA_DIR.
foreach(var BUILD_DIR PREFIX DATA_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_check.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()

foreach(program lenet-train lenet-bench)
  execute_process(COMMAND "${PREFIX}/bin/${program}" --version WORKING_DIRECTORY "${PREFIX}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "^${program} [0-9]+\\.[0-9]+\\.[0-9]+ ")
    message(FATAL_ERROR "installed ${program} --version: exit ${rc}, stdout '${out}', stderr '${err}'")
  endif()
endforeach()

execute_process(COMMAND "${PREFIX}/bin/lenet-train" --backend cpu --epochs 1 --train-limit 512 --test-limit 200
                        --quiet --data-dir "${DATA_DIR}"
                WORKING_DIRECTORY "${PREFIX}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^test acc: [0-9.]+, [0-9.]+ sec/epoch on \\[cpu\\]\n$")
  message(FATAL_ERROR "installed lenet-train's one epoch: exit ${rc}, stdout '${out}', stderr '${err}'")
endif()
file(REMOVE_RECURSE "${PREFIX}")
