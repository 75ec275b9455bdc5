# The CPU container image, built and run for real (docker/build-test.sh, docs/deploy.md):
# podman builds docker/Dockerfile.cpu on a debootstrapped Debian 12 base (no registry, no
# Docker daemon), then the image's server runs the SIGTERM cases of tests/server/ops.test.mjs
# and tests/topology/{proxy,sessions}.test.mjs (both replicas from the image). Label "image":
# Release build only (the image compiles its own fogline). Needs root and the packages of
# `docker/install-deps.sh image`; the base image tarball is cached in build/image between runs.
# RUN_SERIAL: the image build takes every core for a minute.
add_test(NAME image.cpu COMMAND bash ${CMAKE_SOURCE_DIR}/docker/build-test.sh ${CMAKE_BINARY_DIR}/image)
set_tests_properties(image.cpu PROPERTIES LABELS image TIMEOUT 1200 RUN_SERIAL TRUE)
