! A coarray access outside the coarray on another image (an index the compiler cannot
! see) is refused with a Fortran runtime error naming the image; the job ends with a
! nonzero status instead of writing into the target's memory.
program caf_bounds
  implicit none
  integer :: a(10)[*], n, right
  a = 0
  n = 10
  if (command_argument_count() > 100) n = 0   ! opaque to the compiler
  right = merge(1, this_image() + 1, this_image() == num_images())
  sync all
  if (this_image() == 1) a(n + 200)[right] = 1
  sync all
  print '(a)', 'FAIL: the out-of-bounds put was not refused'
end program
