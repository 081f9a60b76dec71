! The coarray tests' check: on failure, say which image and what failed, then
! ERROR STOP 2 (every image ends; the runner sees the status and the FAIL line).
module caf_check
  implicit none
contains
  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      print '(a,i0,2a)', 'FAIL on image ', this_image(), ': ', what
      error stop 2
    end if
  end subroutine check
end module caf_check
