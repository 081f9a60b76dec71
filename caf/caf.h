/* libcaf_firehose internals: the gfortran coarray ABI (gfortran >= 8 descriptors, the
 * `_gfortran_caf_*` calls gfortran 12 emits with -fcoarray=lib) on firehose's public C API.
 *
 * Layout of the runtime (one file per concern), from the bottom up: a file calls only
 * the ones above it in this list (sect.c and convert.c call none).
 *   state.c   images, the image tables, errors and STAT=, image status; the end hook
 *   pending.c deferred puts: the staging arena, caf_flush
 *   barrier.c the barrier of a team, which notices stopped images
 *   mem.c     coarray tokens: register / deregister, where image i's copy lives
 *   sect.c    array sections (descriptors, vector subscripts)
 *   convert.c kind and type conversion of elements
 *   xfer.c    send / get / sendget of sections
 *   byref.c   the by-reference calls (remote components), is_present
 *   sync.c    SYNC ALL / IMAGES / MEMORY, LOCK, EVENT, ATOMIC_*
 *   coll.c    CO_BROADCAST / SUM / MIN / MAX / REDUCE
 *   team.c    FORM / CHANGE / END / SYNC TEAM, RANDOM_INIT
 *   stop.c    STOP, ERROR STOP, FAIL IMAGE, the end of the program
 * The lower files reach the higher ones only through hooks the higher ones register
 * (caf_end_hook, caf_at_end).
 *
 * Invariants:
 *   - Every image's world rank is its image index in the initial team minus one.
 *   - A token's `base[w]` is the address of world rank w's copy (NULL where the
 *     coarray was not established: a coarray allocated inside a team).
 *   - Puts issued by send calls are complete (visible at the target) before any
 *     image-control statement, any get, and any atomic of this image returns: caf_flush().
 */
#ifndef FH_CAF_H
#define FH_CAF_H

#include <firehose.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CAF_MAX_DIM 15

/* --- the gfortran ABI (libgfortran's caf/libcaf.h, GCC >= 8) --- */
enum { BT_UNKNOWN = 0, BT_INTEGER, BT_LOGICAL, BT_REAL, BT_COMPLEX, BT_DERIVED, BT_CHARACTER,
       BT_CLASS };

typedef struct { ptrdiff_t stride, lbound, ubound; } caf_dim_t;
typedef struct { size_t elem_len; int version; signed char rank, type; short attribute; } caf_dtype_t;
typedef struct gfc_desc {
  void *base_addr;
  ptrdiff_t offset;
  caf_dtype_t dtype;
  ptrdiff_t span;
  caf_dim_t dim[];
} gfc_desc_t;

typedef struct {
  size_t nvec;
  union {
    struct { void *vector; int kind; } v;
    struct { ptrdiff_t lower_bound, upper_bound, stride; } triplet;
  } u;
} caf_vector_t;

typedef enum {
  CAF_REGTYPE_COARRAY_STATIC, CAF_REGTYPE_COARRAY_ALLOC, CAF_REGTYPE_LOCK_STATIC,
  CAF_REGTYPE_LOCK_ALLOC, CAF_REGTYPE_CRITICAL, CAF_REGTYPE_EVENT_STATIC,
  CAF_REGTYPE_EVENT_ALLOC, CAF_REGTYPE_COARRAY_ALLOC_REGISTER_ONLY,
  CAF_REGTYPE_COARRAY_ALLOC_ALLOCATE_ONLY
} caf_register_t;

enum { CAF_REF_COMPONENT, CAF_REF_ARRAY, CAF_REF_STATIC_ARRAY };
enum { CAF_ARR_REF_NONE = 0, CAF_ARR_REF_VECTOR, CAF_ARR_REF_FULL, CAF_ARR_REF_RANGE,
       CAF_ARR_REF_SINGLE, CAF_ARR_REF_OPEN_END, CAF_ARR_REF_OPEN_START };

typedef struct caf_reference {
  struct caf_reference *next;
  int type;
  size_t item_size;
  union {
    struct { ptrdiff_t offset, caf_token_offset; } c;
    struct {
      unsigned char mode[CAF_MAX_DIM];
      int static_array_type;
      union {
        struct { ptrdiff_t start, end, stride; } s;
        struct { void *vector; size_t nvec; int kind; } v;
      } dim[CAF_MAX_DIM];
    } a;
  } u;
} caf_reference_t;

/* ISO_FORTRAN_ENV's values in gfortran (STAT_UNLOCKED is 0 there). */
enum { CAF_STAT_UNLOCKED = 0, CAF_STAT_LOCKED = 1, CAF_STAT_LOCKED_OTHER_IMAGE = 2,
       CAF_STAT_STOPPED_IMAGE = 6000, CAF_STAT_FAILED_IMAGE = 6001 };
/* Our own STAT= code for everything else (a nonzero value the standard leaves to us). */
#define CAF_STAT_ERROR 1000

/* --- teams --- */
typedef struct caf_team {
  struct fh_ctx_t *ctx; /* collectives and barriers of the team */
  int rank, size;       /* this image's index - 1, number of images */
  int *world;           /* world[i]: world rank of team image i + 1 */
  int number;           /* TEAM_NUMBER (-1 for the initial team) */
  struct caf_team *parent;
  int active;           /* CHANGE TEAM entered and not left */
  int key;              /* this image's ordering key in the FORM TEAM that made it */
  int64_t gen;          /* the parent's FORM TEAM that made (or last reused) it */
  int64_t forms;        /* FORM TEAM statements executed with this team as parent */
} caf_team_t;

/* --- tokens --- */
typedef enum { MEM_HEAP, MEM_LOCAL } caf_mem_t;
typedef struct caf_token {
  uint32_t magic;          /* CAF_TOKEN_MAGIC while live */
  caf_register_t regtype;
  caf_mem_t mem;
  void *local;             /* this image's copy */
  size_t size;             /* bytes of every image's copy */
  void **base;             /* base[world rank], NULL if not established there */
  gfc_desc_t *desc;        /* the program's descriptor of an allocatable coarray */
  struct caf_token *next, *prev;
} caf_token_t;
#define CAF_TOKEN_MAGIC 0xcaf70c3eu

/* --- global state (state.c) --- */
typedef struct {
  struct fh_ctx_t *ctx; /* the world context: every RMA and atomic goes through it */
  int me, np;           /* world rank, world size */
  caf_team_t initial;
  caf_team_t *current;
  uint64_t *status;     /* heap: status[w] = 0 running, else 1 + stop code of world rank w;
                           status[np] = how many images have stopped */
  uint64_t **status_at; /* status_at[w]: address of rank w's status array */
  uint64_t *notes;      /* heap: notes[w] = SYNC IMAGES notifications received from w */
  uint64_t **notes_at;
  uint64_t *seen;       /* local: notifications from w consumed so far */
  bool puts_pending;
  bool ended;           /* this image has ended: its contexts are finalized */
} caf_state_t;
extern caf_state_t caf;

/* state.c */
void caf_need_init(void);
void _gfortran_caf_init(int *argc, char ***argv);
int caf_world_of(int image); /* image index (1-based, current team) -> world rank, or -1 */
bool caf_stopped(int world);
bool caf_any_stopped(void);
int caf_report(int *stat, char *errmsg, size_t errmsg_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void caf_fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void caf_fh_check(int rc, const char *what);
void caf_terminate(int code, bool error) __attribute__((noreturn));
extern void (*caf_end_hook)(int code); /* stop.c: how an image ends normally */
void caf_at_end(void (*fn)(void));     /* run fn when the image ends (last in, first) */
void caf_run_at_end(void);

/* pending.c */
void caf_flush(void);
char *caf_stage(size_t n, int world, uintptr_t lo, uintptr_t hi);

/* barrier.c: the ids of the initial team's barrier (stop.c's protocol) */
enum { CAF_BARRIER_LIVE = 0, CAF_BARRIER_DONE = 1 };
int caf_barrier(caf_team_t *t, int *stat, char *errmsg, size_t errmsg_len);

/* mem.c */
caf_token_t *caf_token(void *token, const char *what);
char *caf_remote(caf_token_t *t, int world, size_t offset, size_t nbytes, const char *what);

/* sect.c */
typedef struct {
  char *base;                  /* address of the element with all indices 0 */
  int rank;
  size_t n;                    /* number of elements */
  size_t esz;                  /* bytes per element */
  ptrdiff_t ext[CAF_MAX_DIM];
  ptrdiff_t str[CAF_MAX_DIM];  /* byte strides */
  ptrdiff_t *vec[CAF_MAX_DIM]; /* byte offsets of each index (vector subscript) or NULL */
} caf_sect_t;
void sect_from_desc(caf_sect_t *s, gfc_desc_t *d);
int sect_from_vector(caf_sect_t *s, char *origin, gfc_desc_t *d, caf_vector_t *v);
void sect_free(caf_sect_t *s);
ptrdiff_t sect_vec_index(const void *v, int kind, size_t k);
char *sect_addr(const caf_sect_t *s, size_t k);
bool sect_contiguous(const caf_sect_t *s);
size_t desc_elems(gfc_desc_t *d);
int desc_rank(gfc_desc_t *d);

/* convert.c */
typedef struct { int type, kind; size_t len; } caf_elty_t;
caf_elty_t elty_of(gfc_desc_t *d, int kind);
bool elty_same(caf_elty_t a, caf_elty_t b);
void convert_elem(void *dst, caf_elty_t dt, const void *src, caf_elty_t st);

/* xfer.c */
int xfer_put(int world, caf_sect_t *remote, caf_elty_t rt, caf_sect_t *local, caf_elty_t lt);
int xfer_get(caf_sect_t *local, caf_elty_t lt, int world, caf_sect_t *remote, caf_elty_t rt);
void *xfer_fetch(int world, caf_sect_t *remote, size_t *nbytes);


#endif
