/* streamsafe._native's steady-state replay (streamsafe/_replay.c), registered by streamsafe/_native.c. */
#ifndef STREAMSAFE_REPLAY_H
#define STREAMSAFE_REPLAY_H
#include <Python.h>

PyObject *native_bind_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_import_output(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_capsule_data(PyObject *self, PyObject *const *args, Py_ssize_t nargs); /* (in _native.c) */
PyObject *run_fence_steps(PyObject *steps, PyObject *ctx);                               /* (in _native.c) */
PyObject *native_bind_occupancy(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_note_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char bind_occupancy_doc[];
extern const char note_run_doc[];
extern const char bind_replay_doc[];
extern const char import_output_doc[];
extern const char replay_doc[];
#ifdef STREAMSAFE_FRAME_PROFILE
PyObject *native_frame_profile(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char frame_profile_doc[];
#endif

#endif
