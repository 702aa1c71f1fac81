/* corun.runtime.transports._sockio: recv and send on a stream socket's fd.
 *
 * What the compiled stream transport calls on every read and write, in place
 * of socket.recv_into() plus a copy, and socket.send(). The differences that
 * make it cheaper: the arguments are positional (no keyword parsing), the
 * bytes read are copied straight out of the loop's buffer (no memoryview
 * slice), and the GIL is kept: with MSG_DONTWAIT the call cannot block, so
 * releasing and taking the GIL around it (two mutex operations and a
 * condition variable) buys nothing. uvloop keeps it for the same reason.
 * MSG_NOSIGNAL: a closed peer is an EPIPE error, never a SIGPIPE, even where
 * the embedding program did not ignore SIGPIPE as python does.
 *
 * Errors are OSError subclasses chosen from errno, as the socket module's:
 * BlockingIOError, ConnectionResetError, BrokenPipeError and so on.
 * sockio.py keeps the pure-Python equivalents, for builds without a compiler.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <sys/socket.h>

static int
fd_of(PyObject *arg, int *fd)
{
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (value < 0 || value > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "file descriptor out of range");
        return -1;
    }
    *fd = (int)value;
    return 0;
}

PyDoc_STRVAR(recv_doc,
"recv(sock, fd, buffer, /)\n--\n\n"
"Read what the socket fd has, up to len(buffer), into buffer; return a copy.\n\n"
"b'' at end of stream. Never blocks: BlockingIOError when nothing is there.\n"
"sock is not used (the pure-Python version calls its recv_into).");

static PyObject *
sockio_recv(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int fd;
    Py_buffer view;
    ssize_t got;
    PyObject *result;

    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "recv() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (fd_of(args[1], &fd) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    got = recv(fd, view.buf, (size_t)view.len, MSG_DONTWAIT);
    if (got < 0)
        result = PyErr_SetFromErrno(PyExc_OSError);
    else
        result = PyBytes_FromStringAndSize((const char *)view.buf, got);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(send_doc,
"send(sock, fd, data, /)\n--\n\n"
"Send what the socket fd takes of data at once; return the number of bytes sent.\n\n"
"Never blocks: BlockingIOError when the socket's buffer is full.\n"
"sock is not used (the pure-Python version calls its send).");

static PyObject *
sockio_send(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int fd;
    Py_buffer view;
    ssize_t sent;

    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "send() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (fd_of(args[1], &fd) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    sent = send(fd, view.buf, (size_t)view.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    PyBuffer_Release(&view);
    if (sent < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(sent);
}

static PyMethodDef sockio_methods[] = {
    {"recv", (PyCFunction)(void (*)(void))sockio_recv, METH_FASTCALL, recv_doc},
    {"send", (PyCFunction)(void (*)(void))sockio_send, METH_FASTCALL, send_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot sockio_slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef sockio_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "corun.runtime.transports._sockio",
    .m_doc = "recv and send on a stream socket's fd, for corun's stream transport.",
    .m_size = 0,
    .m_methods = sockio_methods,
    .m_slots = sockio_slots,
};

PyMODINIT_FUNC
PyInit__sockio(void)
{
    return PyModuleDef_Init(&sockio_module);
}
